package recovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvidx/kvidx/wal"
)

// ErrNoSpace: a snapshot was not written because the filesystem lacks room
// for it and for the WAL to go on.
var ErrNoSpace = errors.New("not enough free space for a snapshot")

// ErrLowSpace: an append was refused because the filesystem of the WAL has
// less free space than the next snapshot and the WAL's next entries need.
// It wraps [wal.ErrOverloaded]: nothing of the batch was taken, and the
// same batch may be retried later.
var ErrLowSpace = fmt.Errorf("appends paused while free space is low: %w", wal.ErrOverloaded)

// A snapshot's size is about a·entries + b·holder-blocks (a place record,
// and a holder in it: a worker id, and the block hash unless it equals the
// router seq): 1 byte a holder-block where many workers hold the same
// blocks, about 31 where each block has one holder. Before this Store saw a
// snapshot, a holder-block is taken at maxSnapshotBytesPerHB, above both.
const maxSnapshotBytesPerHB = 44

// snapshotSize is the last snapshot written or loaded: its file's bytes,
// entries and holder-blocks.
type snapshotSize struct {
	bytes, entries, holderBlocks int64
}

// roomFor checks, before a snapshot of entries and holderBlocks is written,
// that the filesystem of the snapshot directory has room for it and,
// beyond it, for the WAL's next entries. The WAL shares the filesystem: a
// snapshot that fills it, if only until its temporary file is removed,
// makes the append that needs a block then fail, and a failed write fences
// the log, so that the node acknowledges nothing more until a restart. A
// filesystem whose free space cannot be read is not checked.
func (s *Store) roomFor(entries, holderBlocks int) error {
	free, err := s.freeSpace(s.snapDir)
	if err != nil {
		return nil
	}
	if need := s.snapshotNeed(entries, holderBlocks); free < need {
		return fmt.Errorf("data dir %s: a snapshot of %d holder-blocks was not written: it needs about %.1f MiB with room left for the WAL, and %.1f MiB are free on the filesystem of %s: %w",
			s.dir, holderBlocks, mib(need), mib(free), s.snapDir, ErrNoSpace)
	}
	return nil
}

// snapshotNeed is the free space roomFor asks of a snapshot of entries and
// holderBlocks: a quarter over its estimated size, a megabyte for bbolt's
// pages, and the WAL's allowance.
func (s *Store) snapshotNeed(entries, holderBlocks int) int64 {
	est := float64(holderBlocks) * maxSnapshotBytesPerHB
	if last := s.lastSize.Load(); last != nil && last.entries > 0 && last.holderBlocks > 0 {
		// With size = a·entries + b·holder-blocks (a, b >= 0), the last
		// file's size scaled by the larger of the two growths bounds the
		// next one: a file of shared blocks says little of its entries'
		// cost, and a growth in entries must not pass for a small one.
		est = float64(last.bytes) * max(float64(entries)/float64(last.entries), float64(holderBlocks)/float64(last.holderBlocks))
	}
	return int64(est*1.25) + 1<<20 + s.walAllowance()
}

// walAllowance is room for the WAL's next entries: two segments (the tail
// is filled up to its size when the log moves to it) and an entry.
func (s *Store) walAllowance() int64 {
	segment, entry := int64(s.opts.SegmentSize), int64(s.opts.MaxEntryBytes)
	if segment <= 0 {
		segment = 512 << 10
	}
	if entry <= 0 {
		entry = 4 << 20
	}
	return 2*segment + entry
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// noteSnapshotSize records the size of a snapshot of entries and
// holderBlocks at path, for the next roomFor.
func (s *Store) noteSnapshotSize(path string, entries, holderBlocks int) {
	if fi, err := os.Stat(path); err == nil {
		s.lastSize.Store(&snapshotSize{bytes: fi.Size(), entries: int64(entries), holderBlocks: int64(holderBlocks)})
	}
}

// freeBytes returns the bytes an unprivileged writer may still use on the
// filesystem holding dir.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), nil
}

// Appends stop, with ErrLowSpace, while the WAL's filesystem has less free
// space than a snapshot of the index needs (see roomFor) plus another WAL
// allowance. A WAL that filled the disk would fail a write and fence the
// log, and the node would acknowledge nothing more until a restart; a
// paused node takes events again as soon as space is back: when an
// operator frees some, or when a snapshot (which the threshold leaves room
// for) lets the WAL be truncated and the oldest snapshot be pruned.
//
// The free space is read at most every spaceCheckEvery, by whichever
// append comes first after that: a statfs per batch would cost more than
// the batch. Between two readings the WAL writes at most a few MB (8.5
// bytes a stored block at a million block ops a second), within the
// allowance.
const spaceCheckEvery = 250 * time.Millisecond

// spaceGuard is the state of that check.
type spaceGuard struct {
	every       time.Duration // spaceCheckEvery; tests set 0 (every append)
	next        atomic.Int64  // unix nanoseconds of the next reading
	checked     atomic.Bool   // the last reading succeeded
	low         atomic.Bool
	free, floor atomic.Int64 // of the last reading
}

// FreeSpace returns the free bytes of the WAL's filesystem as last read
// and the floor below which appends pause; checked is false while the
// free space was never read or cannot be (then appends never pause).
func (s *Store) FreeSpace() (free, floor int64, checked bool) {
	g := &s.space
	return g.free.Load(), g.floor.Load(), g.checked.Load()
}

// LowSpace reports whether appends are paused for lack of free space.
func (s *Store) LowSpace() bool { return s.space.low.Load() }

// appendRoom returns ErrLowSpace (wrapped, with the figures) while appends
// are paused, reading the free space first when it is due.
func (s *Store) appendRoom() error {
	g := &s.space
	now := time.Now().UnixNano()
	if next := g.next.Load(); now >= next && g.next.CompareAndSwap(next, now+int64(g.every)) {
		s.checkSpace()
	}
	if !g.low.Load() {
		return nil
	}
	return fmt.Errorf("data dir %s: %.1f MiB free on the WAL's filesystem, below the %.1f MiB kept for the next snapshot and the WAL's next entries; free some space (a snapshot, when the index changed, may let the WAL be truncated): %w",
		s.dir, mib(g.free.Load()), mib(g.floor.Load()), ErrLowSpace)
}

// checkSpace reads the free space and moves the guard in or out of its
// paused state, logging each change.
func (s *Store) checkSpace() {
	g := &s.space
	free, err := s.freeSpace(filepath.Join(s.dir, WALDirName))
	if err != nil {
		// Unreadable: not checked, as roomFor does not check snapshots.
		g.checked.Store(false)
		if g.low.Swap(false) {
			s.logger.Warn("appends resumed: the free space can no longer be read", "err", err)
		}
		return
	}
	st := s.ix.Stats()
	floor := s.snapshotNeed(st.Entries, st.HolderBlocks) + s.walAllowance()
	g.free.Store(free)
	g.floor.Store(floor)
	g.checked.Store(true)
	low := free < floor
	if g.low.Swap(low) == low {
		return
	}
	if low {
		s.logger.Warn("appends paused: the WAL's filesystem is nearly full; events are refused (retry later) until space is freed",
			"free_mib", mib(free), "floor_mib", mib(floor))
	} else {
		s.logger.Info("appends resumed: free space is back", "free_mib", mib(free), "floor_mib", mib(floor))
	}
}
