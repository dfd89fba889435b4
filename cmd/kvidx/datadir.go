package main

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/snapshot"
)

// isDataDir reports whether path is a directory (a data directory, as
// opposed to a snapshot file).
func isDataDir(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// planRecovery is recovery.Plan of dir with a progress bar on progress,
// when it is a terminal (nil: no bar), for each snapshot loaded (with load)
// or verified.
func planRecovery(ctx context.Context, dir string, load bool, progress io.Writer) (*recovery.RecoveryPlan, *engine.Index, error) {
	opts := recovery.PlanOptions{Load: load}
	if progress != nil {
		opts.Progress = func(f snapshot.File, places int) (func(done, total int), func()) {
			return snapshotBar(progress, f, load, places)
		}
	}
	return recovery.Plan(ctx, dir, opts)
}

// snapshotBar returns the progress callbacks of a bar on w (see newBar) for
// the load (with load) or verification of the snapshot f, whose meta holds
// places places when known before the check: a load's bar is drawn once its
// first chunk reports the total.
func snapshotBar(w io.Writer, f snapshot.File, load bool, places int) (step func(done, total int), end func()) {
	var (
		prog  *bar
		shown int
	)
	started := !load
	if !load {
		prog = newBar(w, int64(places), "verifying "+filepath.Base(f.Path), false)
	}
	step = func(done, total int) {
		if !started {
			prog, started = newBar(w, int64(total), "loading snapshot", false), true
		}
		prog.add(int64(done - shown))
		shown = done
	}
	return step, func() { prog.done() }
}
