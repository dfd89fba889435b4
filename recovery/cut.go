package recovery

// Snapshots and a cut of the WAL.
//
// kvidx wal repair cuts a log damaged in the middle. A cut after entry N
// must not end the log before a snapshot a restart would use
// ([MoveAsideDamaged] first sets aside, as Open does, the damaged snapshots
// that would otherwise stop it); a cut before entry N loses nothing only
// when a snapshot that verifies holds every entry before N
// ([CoveringSnapshot]).

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// MoveAsideDamaged renames *.damaged (see [MoveAside]), as recovery does,
// the snapshots of snaps (newest first, as [snapshot.List] gives them) past
// entry after, newest first up to the first that verifies, that are
// damaged ([SnapshotDamaged]), calling moved, when set, for each with the
// damage found; it returns the snapshots left. One that cannot be read for
// another reason (another build's format, permissions, a lock, an I/O
// error) is not known to be damaged: it may hold the only copy of entries
// a cut after entry after drops, so it is an error. Before it renames one,
// it checks that no kvidx holds the WAL directory walDir (an error
// wrapping [wal.ErrLocked]).
func MoveAsideDamaged(ctx context.Context, walDir string, snaps []snapshot.File, after uint64, moved func(f snapshot.File, damage error)) ([]snapshot.File, error) {
	snaps = slices.Clone(snaps)
	for len(snaps) > 0 {
		f, ok := EndProof(snaps, after)
		if !ok || f.Index <= after {
			return snaps, nil
		}
		verr := VerifySnapshot(ctx, f.Path)
		if verr == nil {
			return snaps, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !SnapshotDamaged(f.Path, verr) {
			return nil, fmt.Errorf("snapshot %s, at WAL index %d after entry %d, cannot be read here (%v) but is not known to be damaged: the cut would end the log before it, which kvidx refuses; fix that or move it out of %s first",
				filepath.Base(f.Path), f.Index, after, verr, filepath.Dir(f.Path))
		}
		lock, err := wal.LockDir(walDir)
		if err != nil {
			return nil, err
		}
		if err := lock.Unlock(); err != nil {
			return nil, err
		}
		if err := MoveAside(f); err != nil {
			return nil, err
		}
		if moved != nil {
			moved(f, verr)
		}
		snaps = slices.DeleteFunc(snaps, func(g snapshot.File) bool { return g.Path == f.Path })
	}
	return snaps, nil
}

// CoveringSnapshot returns the newest snapshot of the data directory
// dataDir at WAL index before-1 or later that verifies whole and whose meta
// agrees with its name, or an error saying why none does: removing the WAL
// entries before index before is safe only when it holds them. Once ctx is
// done, the error wraps ctx's.
func CoveringSnapshot(ctx context.Context, dataDir string, before uint64) (snapshot.File, error) {
	if before == 0 {
		return snapshot.File{}, errors.New("WAL index 0: WAL indexes start at 1")
	}
	snaps, err := snapshot.List(filepath.Join(dataDir, SnapshotDirName))
	if err != nil {
		return snapshot.File{}, err
	}
	var why []string
	for _, f := range snaps { // newest first
		if f.Index+1 < before {
			break
		}
		var err error
		if m, misnamed := Misnamed(f); misnamed != "" {
			err = fmt.Errorf("its meta says WAL index %d", m)
		} else {
			err = VerifySnapshot(ctx, f.Path)
		}
		if err == nil {
			return f, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			// Not "no snapshot verifies": none was verified.
			return snapshot.File{}, fmt.Errorf("verifying snapshot %s: %w", f.Path, cerr)
		}
		why = append(why, fmt.Sprintf("%s: %v", filepath.Base(f.Path), err))
	}
	msg := fmt.Sprintf("no snapshot of %s at WAL index %d or later verifies, so removing the entries before %d would lose them", dataDir, before-1, before)
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return snapshot.File{}, errors.New(msg)
}
