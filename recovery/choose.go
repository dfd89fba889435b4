package recovery

import (
	"context"

	"github.com/kvidx/kvidx/snapshot"
)

// TrySnapshot tries snapshot file f as a restart would use it: it loads
// it, or, read-only, verifies it, and returns the WAL index its meta holds
// (in the Meta), or why it cannot be used. Its error is reported as the
// skip reason; one that says the file is damaged (see [SnapshotDamaged])
// puts f among the snapshots to move aside.
type TrySnapshot func(f snapshot.File) (snapshot.Meta, error)

// SnapshotChoice is the snapshot a restart uses, and why it does without
// the others (see [ChooseSnapshot]).
type SnapshotChoice struct {
	// Used is the snapshot chosen and Meta its meta (what TrySnapshot
	// returned for it); valid when Found. With no snapshot chosen and no
	// Refusal, the WAL is replayed from index 1.
	Used  snapshot.File
	Meta  snapshot.Meta
	Found bool
	// Skipped is every snapshot done without, with why, in the order
	// considered (newest first).
	Skipped []SkippedSnapshot
	// Damaged is the skipped snapshots that are damaged or misnamed (their
	// meta says another WAL index than their name): a restart that
	// succeeds moves them aside (see [DamagedSuffix]).
	Damaged []snapshot.File
	// Refusal, when not "", is why recovery refuses the directory: its
	// newest snapshot lies past the WAL's end ([WALBehindSnapshot], and
	// PastEnd is set), or none is usable and the WAL does not start at
	// index 1 ([NoSnapshotRefusal]).
	Refusal string
	// PastEnd reports that the Refusal is a snapshot past the WAL's end: on
	// a running server's directory, read without its lock, it may be one
	// published after the WAL was read.
	PastEnd bool
}

// ChooseSnapshot makes recovery's choice of the snapshot to start from,
// for the data directory dataDir whose snapshots are snaps (newest first,
// as [snapshot.List] gives them) and whose WAL holds entries first..last
// with gaps (in index order) where it is not whole. Snapshots named past
// last are skipped when their meta says an index at or before it (a copy
// under a wrong name), and refused otherwise: their name is proof that the
// WAL once reached it. Snapshots the WAL is not whole after are skipped
// ([NotReached]); the others are tried, newest first, with try, until one
// succeeds whose meta agrees with its name. With none, and the WAL whole
// only from an index past 1, the choice is a refusal.
//
// It is the one choice for a restart ([Open], which loads each candidate)
// and for the read-only dry run that predicts it (kvidx inspect, kvidx
// recover --dry-run, which load or verify them): the two agree by
// construction. Its error is ctx's, when ctx is done and a try failed.
func ChooseSnapshot(ctx context.Context, dataDir string, snaps []snapshot.File, first, last uint64, gaps []Span, try TrySnapshot) (SnapshotChoice, error) {
	var c SnapshotChoice
	all := snaps // what a refusal considers: every snapshot found
	skip := func(f snapshot.File, reason string) {
		c.Skipped = append(c.Skipped, SkippedSnapshot{Path: f.Path, Index: f.Index, Reason: reason})
	}
	// contig: the first index from which the WAL is whole up to last.
	contig := first
	for _, g := range gaps {
		contig = max(contig, g.To+1)
	}
	// A published snapshot proves the WAL once reached its index, unless
	// its name is not its index.
	for len(snaps) > 0 && snaps[0].Index > last {
		m, why := Misnamed(snaps[0])
		if why == "" || m > last {
			c.Refusal, c.PastEnd = WALBehindSnapshot(dataDir, snaps[0], last), true
			return c, nil
		}
		skip(snaps[0], why)
		c.Damaged = append(c.Damaged, snaps[0])
		snaps = snaps[1:]
	}
	for _, f := range snaps {
		if f.Index+1 < contig {
			skip(f, NotReached(f.Index, first, contig, gapsAfter(gaps, f.Index)))
			continue
		}
		m, err := try(f)
		if err != nil {
			if ctx.Err() != nil {
				return c, ctx.Err()
			}
			skip(f, err.Error())
			// A damaged file is moved aside; one that is unreadable for
			// another reason (permissions, a lock held, another build's
			// format) stays, not counted among the snapshots kept.
			if SnapshotDamaged(f.Path, err) {
				c.Damaged = append(c.Damaged, f)
			}
			continue
		}
		if m.Index != f.Index {
			skip(f, MisnamedReason(m.Index, f))
			c.Damaged = append(c.Damaged, f)
			continue
		}
		c.Used, c.Meta, c.Found = f, m, true
		return c, nil
	}
	if contig > 1 {
		c.Refusal = NoSnapshotRefusal(dataDir, all, first, last, contig, gaps)
	}
	return c, nil
}
