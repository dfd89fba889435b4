package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// recoveryPlan is what a restart of a data directory would do, found
// read-only: it mirrors recovery.Open's choices (see package recovery), its
// snapshot the one recovery.ChooseSnapshot picks as a restart's does,
// without taking the lock, cleaning temporary files or cutting the WAL.
type recoveryPlan struct {
	Format int `json:"format"`
	// FormatProblem, when not empty, is why recovery.Open refuses the
	// directory's FORMAT file (or its absence next to existing data).
	FormatProblem string       `json:"format_problem,omitempty"`
	WAL           walSummary   `json:"wal"`
	SnapshotUsed  *snapshotRef `json:"snapshot_used"`
	Skipped       []skipped    `json:"snapshots_skipped"`
	// ReplayFrom..ReplayTo are the WAL entries replayed after the snapshot
	// (ReplayEntries 0: none).
	ReplayFrom    uint64   `json:"replay_from"`
	ReplayTo      uint64   `json:"replay_to"`
	ReplayEntries uint64   `json:"replay_entries"`
	TempFiles     []string `json:"temp_files_to_remove"`
	// Refusal, when not empty, is why recovery.Open would refuse to start.
	Refusal string `json:"refusal,omitempty"`

	layout   wal.Layout
	walDir   string
	usedMeta snapshot.Meta
}

type walSummary struct {
	FirstIndex  uint64   `json:"first_index"`
	LastIndex   uint64   `json:"last_index"`
	Segments    int      `json:"segments"`
	Bytes       int64    `json:"bytes"`
	TornBytes   int64    `json:"torn_bytes"`
	TornSegment string   `json:"torn_segment,omitempty"`
	TornOffset  int64    `json:"torn_offset,omitempty"`
	Gaps        []string `json:"gaps,omitempty"`
	Damage      []string `json:"damage,omitempty"`
	Pending     string   `json:"pending_truncation,omitempty"`
	OpenRefusal string   `json:"open_refusal,omitempty"`
}

type snapshotRef struct {
	File  string `json:"file"`
	Index uint64 `json:"wal_index"`
	Bytes int64  `json:"bytes"`
}

type skipped struct {
	File   string `json:"file"`
	Index  uint64 `json:"wal_index"`
	Reason string `json:"reason"`
}

// checkFormatFile applies recovery.Open's checks of DATA_DIR/FORMAT, read
// only, and returns the version it holds (0: no FORMAT file) and, when a
// restart would refuse the directory, why. err is for I/O errors.
func checkFormatFile(dir string) (version int, problem string, err error) {
	v, err := recovery.CheckFormat(dir)
	if errors.Is(err, recovery.ErrFormat) {
		return v, err.Error(), nil
	}
	return v, "", err
}

// existingDataDir checks that dataDir exists and is a directory, for the
// commands that work on an existing data directory; hint follows "does not
// exist" in the error.
func existingDataDir(dataDir, hint string) error {
	fi, err := os.Stat(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data dir %s does not exist%s", dataDir, hint)
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dataDir)
	}
	return nil
}

// isDataDir reports whether path is a directory (a data directory, as
// opposed to a snapshot file).
func isDataDir(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// refusalText is what a restart of dir would say of err, a failure to open
// its WAL: with the repair to run, for damage inside the log.
func refusalText(ctx context.Context, dir string, err error) string {
	if msg := recovery.DamageRefusal(ctx, dir, err); msg != "" {
		return msg
	}
	return err.Error()
}

// planRecovery finds, read-only, what recovery.Open would do with dir. With
// load, the chosen snapshot is loaded (snapshot.Load, as a restart does) and
// returned; otherwise candidates are checked with Reader.Verify only. Either
// way, a progress bar is drawn on progress when it is a terminal (nil: no bar).
//
// On the directory of a running server, a WAL segment or snapshot listed a
// moment ago can be gone when it is read (the server truncated its WAL or
// pruned a snapshot), and a snapshot published after the WAL was read can
// lie beyond the WAL's end as read: the server at work, not a defect of the
// directory. The plan is then made again, a few times.
func planRecovery(ctx context.Context, dir string, load bool, progress io.Writer) (p *recoveryPlan, ix *engine.Index, err error) {
	for attempt := 1; ; attempt++ {
		var raced bool
		p, ix, raced, err = planRecoveryOnce(ctx, dir, load, progress)
		if !raced || attempt == planAttempts || ctx.Err() != nil {
			return p, ix, err
		}
	}
}

// planAttempts bounds how often planRecovery plans again a directory that
// changed while it read it.
const planAttempts = 5

// planRecoveryOnce is one attempt of planRecovery; raced reports that the
// directory changed while it was read.
func planRecoveryOnce(ctx context.Context, dir string, load bool, progress io.Writer) (_ *recoveryPlan, _ *engine.Index, raced bool, _ error) {
	p, ix, err := planRecoveryRead(ctx, dir, load, progress, &raced)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr == nil {
			raced = true
		}
	}
	return p, ix, raced, err
}

func planRecoveryRead(ctx context.Context, dir string, load bool, progress io.Writer, raced *bool) (*recoveryPlan, *engine.Index, error) {
	if err := existingDataDir(dir, ""); err != nil {
		return nil, nil, err
	}
	// Lists are [] in JSON when empty, as every list kvidx prints is.
	p := &recoveryPlan{walDir: filepath.Join(dir, recovery.WALDirName), Skipped: []skipped{}, TempFiles: []string{}}
	var err error
	if p.Format, p.FormatProblem, err = checkFormatFile(dir); err != nil {
		return nil, nil, err // it names the data dir
	}
	lay, lerr := wal.Inspect(p.walDir)
	p.layout = lay
	w := &p.WAL
	w.FirstIndex, w.LastIndex = lay.FirstIndex, lay.LastIndex
	w.Segments, w.Bytes = len(lay.Segments), lay.Bytes
	w.TornBytes, w.TornSegment, w.TornOffset = lay.TornBytes, lay.TornSegment, lay.TornOffset
	w.Pending = lay.Pending
	for _, g := range lay.Gaps {
		w.Gaps = append(w.Gaps, g.Desc)
	}
	for _, d := range lay.Damage {
		w.Damage = append(w.Damage, d.String())
	}
	if lerr != nil && !errors.Is(lerr, wal.ErrCorrupt) {
		return nil, nil, lerr
	}
	if p.FormatProblem != "" {
		// recovery.Open checks FORMAT before it opens the WAL.
		p.Refusal = p.FormatProblem
		return p, nil, nil
	}
	if fi, err := os.Stat(filepath.Join(p.walDir, wal.LockFileName)); err == nil && !fi.Mode().IsRegular() {
		// A restart opens the lock file first, and could not.
		kind := "a directory"
		if !fi.IsDir() {
			kind = "of type " + fi.Mode().Type().String()
		}
		p.Refusal = fmt.Sprintf("the WAL's lock file %s is %s, not a regular file: the lock cannot be taken",
			filepath.Join(recovery.WALDirName, wal.LockFileName), kind)
		return p, nil, nil
	}
	if lerr != nil {
		w.OpenRefusal = refusalText(ctx, dir, lerr)
		p.Refusal = "the WAL cannot be opened: " + w.OpenRefusal
		return p, nil, nil
	}
	snapDir := filepath.Join(dir, recovery.SnapshotDirName)
	if temps, err := snapshot.TempFiles(snapDir); err == nil {
		for _, t := range temps {
			p.TempFiles = append(p.TempFiles, filepath.Base(t))
		}
	}
	snaps, err := snapshot.List(snapDir)
	if err != nil {
		return nil, nil, err
	}
	// With load, each candidate is loaded, as a restart does; the one chosen
	// is the last one tried. Otherwise each is verified.
	var ix *engine.Index
	try := func(f snapshot.File) (snapshot.Meta, error) {
		ix = nil // a misnamed one's index goes before the next loads
		lix, m, err := loadWithBar(ctx, f.Path, progress)
		if errors.Is(err, fs.ErrNotExist) {
			*raced = true // pruned since it was listed
		}
		ix = lix
		return m, err
	}
	if !load {
		try = func(f snapshot.File) (snapshot.Meta, error) {
			r, err := snapshot.Open(f.Path)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					*raced = true // pruned since it was listed
				}
				return snapshot.Meta{}, err
			}
			defer r.Close()
			return r.Meta(), verifyWithBar(ctx, r, progress)
		}
	}
	c, err := recovery.ChooseSnapshot(ctx, dir, snaps, lay.FirstIndex, lay.LastIndex, lay.Gaps, try)
	if err != nil {
		return nil, nil, err
	}
	for _, sk := range c.Skipped {
		p.Skipped = append(p.Skipped, skipped{File: filepath.Base(sk.Path), Index: sk.Index, Reason: sk.Reason})
	}
	if c.PastEnd {
		// Published after the WAL was read, or the WAL really lost its end:
		// reading again tells.
		*raced = true
	}
	if c.Refusal != "" {
		p.Refusal = c.Refusal
		return p, nil, nil
	}
	last := lay.LastIndex
	from := uint64(1)
	if c.Found {
		p.SnapshotUsed = &snapshotRef{File: filepath.Base(c.Used.Path), Index: c.Used.Index, Bytes: c.Used.Size}
		p.usedMeta = c.Meta
		from = c.Used.Index + 1
	} else {
		ix = nil
	}
	if from <= last {
		p.ReplayFrom, p.ReplayTo, p.ReplayEntries = from, last, last-from+1
		for _, d := range lay.Damage {
			if d.Index >= from && d.Index <= last {
				// With the repair a restart's refusal names.
				ee := &wal.EntryError{Dir: p.walDir, Segment: d.Segment, Offset: d.Offset, Entry: d.Index, Err: d.Err()}
				p.Refusal = "replay would fail: " + recovery.DamageRefusal(ctx, dir, ee)
				return p, nil, nil
			}
		}
	}
	if load && ix == nil {
		ix = engine.New()
	}
	return p, ix, nil
}

// loadWithBar is snapshot.Load with a progress bar on w (see newBar).
func loadWithBar(ctx context.Context, path string, w io.Writer) (*engine.Index, snapshot.Meta, error) {
	var (
		prog    *bar
		started bool
		shown   int
	)
	defer func() { prog.done() }()
	return snapshot.LoadWith(ctx, path, snapshot.LoadOptions{Progress: func(done, total int) {
		if !started && w != nil {
			prog, started = newBar(w, int64(total), "loading snapshot", false), true
		}
		prog.add(int64(done - shown))
		shown = done
	}})
}

// verifyWithBar is r.Verify with a progress bar on w (see newBar).
func verifyWithBar(ctx context.Context, r *snapshot.Reader, w io.Writer) error {
	var prog *bar
	if w != nil {
		prog = newBar(w, int64(r.Meta().Places), "verifying "+filepath.Base(r.Path()), false)
	}
	defer prog.done()
	shown := 0
	return r.VerifyWith(ctx, func(done, _ int) {
		prog.add(int64(done - shown))
		shown = done
	})
}

// replayPlan applies the plan's WAL entries to ix, reading the WAL
// read-only, and returns how many events it applied and rejected.
func replayPlan(p *recoveryPlan, ix *engine.Index, prog *bar) (events, rejected uint64, err error) {
	if p.ReplayEntries == 0 {
		return 0, 0, nil
	}
	_, err = wal.Scan(p.walDir, p.ReplayFrom, p.ReplayTo, func(e wal.Entry) error {
		for i := range e.Events {
			events++
			if ix.Apply(&e.Events[i]) != nil {
				rejected++
			}
		}
		prog.add(1)
		return nil
	})
	return events, rejected, err
}
