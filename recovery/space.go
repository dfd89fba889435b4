package recovery

// Low free space.
//
// Appends pause, failing with [ErrLowSpace] (a retriable [wal.ErrOverloaded]),
// while the WAL's filesystem has less free space than a snapshot of the
// index needs plus room for the WAL's next entries: a WAL that filled the
// disk would fence the log until a restart, while a paused store resumes
// by itself once space is back, and still has room for the snapshot whose
// retention may free it.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvidx/kvidx/engine"
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
// that the filesystem of the snapshot directory has room for it and, when
// the WAL shares the filesystem, beyond it for the WAL's next entries: a
// snapshot that fills it, if only until its temporary file is removed,
// makes the append that needs a block then fail, and a failed write fences
// the log, so that the node acknowledges nothing more until a restart. On
// a filesystem of its own a snapshot fills none the WAL writes to, and the
// append guard keeps the WAL's allowance on the WAL's. A filesystem whose
// free space cannot be read is not checked.
//
// It returns the free space it read and the need it compared with it (0,
// 0 when it could not read the free space).
func (s *Store) roomFor(entries, holderBlocks int) (free, need int64, err error) {
	free, err = s.freeSpace(s.snapDir)
	if err != nil {
		return 0, 0, nil
	}
	need = s.snapshotNeed(entries, holderBlocks)
	withWAL := " with room left for the WAL"
	if !s.space.sharedFS {
		// Room the WAL would never take here: asked for, it refused a
		// snapshot that fits, and so the truncation that may end a pause.
		need -= s.walAllowance()
		withWAL = ""
	}
	if free < need {
		return free, need, fmt.Errorf("data dir %s: a snapshot of %d holder-blocks was not written: it needs about %.1f MiB%s, and %.1f MiB are free on the filesystem of %s: %w",
			s.dir, holderBlocks, mib(need), withWAL, mib(free), s.snapDir, ErrNoSpace)
	}
	return free, need, nil
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
		// A small file is mostly bbolt's fixed pages (a snapshot of one
		// holder-block is some 300 KiB), which do not scale: the bound
		// per holder-block caps the estimate (found by review: after a
		// snapshot of a handful of blocks, 200k holder-blocks were
		// estimated at 66 GB, and the guard paused ingest for good).
		est = min(est, float64(last.bytes)*max(float64(entries)/float64(last.entries), float64(holderBlocks)/float64(last.holderBlocks)))
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

// Appends stop, with ErrLowSpace, before the WAL can fill its filesystem:
// a WAL write that fails fences the log, and the node acknowledges nothing
// more until a restart, while a paused node takes events again as soon as
// space is back (an operator frees some, or a snapshot lets the WAL be
// truncated and the oldest snapshot be pruned).
//
// The floor kept free is two WAL allowances (see walAllowance) plus, when
// snapshots share the WAL's filesystem, the room roomFor asks of a
// snapshot of the index: whenever appends pause, a snapshot still fits,
// with an allowance left for the WAL while it is written.
//
// The free space is read at most every spaceCheckEvery (a statfs per batch
// would cost more than the batch), and each reading sets a budget: the
// free space beyond the floor, less what appends admitted and not yet
// answered may still write. Each append takes from it a bound on what it
// adds: its entry's bytes (wal.EntryBound) and the growth of the next
// snapshot's room by its stored blocks. When the budget runs out the free
// space is read again at once, so concurrent appends cannot pass the floor
// between two readings. A batch that does not fit in what is left pauses
// appends as an empty budget does (when it is within a WAL allowance: a
// larger one is refused alone), and a pause ends only with an allowance
// free above the floor, so that it does not flap near it.
//
// While a snapshot is written its file takes the room the floor kept for
// it, and a reading would count it twice: from the moment roomFor passes
// until the snapshot is done, the budget is what its reading left beyond
// the snapshot and one WAL allowance, and no reading changes it.
const spaceCheckEvery = 250 * time.Millisecond

// spaceGuard is the state of that check.
type spaceGuard struct {
	every time.Duration // spaceCheckEvery; tests set 0 (a reading per append)
	// base is the origin of next: a monotonic clock, which a step of the
	// wall clock does not move.
	base time.Time
	next atomic.Int64 // nanoseconds after base of the next reading
	// sharedFS: the snapshot directory is on the WAL's filesystem.
	sharedFS bool

	mu          sync.Mutex // serialises readings and the snapshot's bracket
	checked     atomic.Bool
	low         atomic.Bool
	free, floor atomic.Int64 // of the last reading
	budget      atomic.Int64
	inflight    atomic.Int64 // bounds of appends admitted and not answered
	snapshot    bool         // a snapshot is being written (guarded by mu)
}

// initSpace sets the guard up for the store's directories.
func (s *Store) initSpace() {
	g := &s.space
	g.every = spaceCheckEvery
	g.base = time.Now()
	g.sharedFS = sameFilesystem(filepath.Join(s.dir, WALDirName), s.snapDir)
}

// sameFilesystem reports whether a and b are on one filesystem (true when
// that cannot be told: the guard then keeps room for snapshots too).
func sameFilesystem(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return true
	}
	return sa.Dev == sb.Dev
}

// FreeSpace returns the free bytes of the WAL's filesystem as last read
// and the floor below which appends pause; checked is false while the
// free space was never read or cannot be (then appends never pause).
func (s *Store) FreeSpace() (free, floor int64, checked bool) {
	s.readSpaceIfDue()
	g := &s.space
	return g.free.Load(), g.floor.Load(), g.checked.Load()
}

// LowSpace reports whether appends are paused for lack of free space,
// reading the free space first when a reading is due (so that a pause
// ends, in what the server reports, without an append).
func (s *Store) LowSpace() bool {
	s.readSpaceIfDue()
	return s.space.low.Load()
}

// readSpaceIfDue reads the free space when spaceCheckEvery has passed
// since the last reading.
func (s *Store) readSpaceIfDue() {
	g := &s.space
	now := int64(time.Since(g.base))
	if next := g.next.Load(); now >= next && g.next.CompareAndSwap(next, now+int64(g.every)) {
		s.readSpace()
	}
}

// appendRoom admits an append that adds at most cost bytes to the WAL's
// filesystem (see appendCost), or returns ErrLowSpace (wrapped, with the
// figures). An admitted append must call done when answered.
func (s *Store) appendRoom(cost int64) (done func(), err error) {
	g := &s.space
	s.readSpaceIfDue()
	admit := func() bool {
		if g.low.Load() {
			return false
		}
		// In flight before the budget is taken: a reading in between
		// counts it then, not nowhere.
		g.inflight.Add(cost)
		if g.budget.Add(-cost) < 0 {
			// Refused: a batch too large for what is left must not
			// take it from the smaller ones after it.
			g.budget.Add(cost)
			g.inflight.Add(-cost)
			return false
		}
		return true
	}
	if !admit() {
		// The budget is spent (or appends pause): read now, whatever the
		// time since the last reading.
		s.readSpace()
		if !admit() {
			// A batch that does not fit in what is left pauses appends
			// as an empty budget does: readiness, the snapshot that may
			// make room and the stats say so (found by drilling on a
			// small filesystem: batches were refused while the node said
			// it was ready, and no snapshot was taken). Not one larger
			// than the allowance a pause waits for: it would not fit when
			// the pause ends either, and the pause would flap with each
			// retry of it (found by review); it is refused alone.
			if cost <= s.walAllowance() {
				s.pauseForBatch(cost)
			}
			// The figure where a pause ends too: between it and the
			// floor, "stop at" alone reads as a contradiction.
			return nil, fmt.Errorf("data dir %s: %.1f MiB free on the WAL's filesystem, and appends stop at %.1f MiB, kept for the next snapshot and the WAL's next entries, and once paused resume at %.1f MiB; free some space (a snapshot, when the index changed, may let the WAL be truncated): %w",
				s.dir, mib(g.free.Load()), mib(g.floor.Load()), mib(g.floor.Load()+s.walAllowance()), ErrLowSpace)
		}
	}
	return func() { g.inflight.Add(-cost) }, nil
}

// appendCost bounds what appending events adds to the WAL's filesystem:
// the entry, and the growth of the next snapshot's room (when snapshots
// share the filesystem) by the blocks it stores.
func (s *Store) appendCost(events []engine.Event, positions []wal.Position) int64 {
	cost := wal.EntryBound(events, positions)
	if s.space.sharedFS {
		var blocks int64
		for i := range events {
			blocks += int64(len(events[i].Blocks))
		}
		cost += int64(float64(blocks) * s.snapshotBytesPerBlock() * 1.25)
	}
	return cost
}

// snapshotBytesPerBlock bounds the growth of a snapshot's size by one more
// stored block (one more entry and holder-block at most): see
// snapshotNeed.
func (s *Store) snapshotBytesPerBlock() float64 {
	if last := s.lastSize.Load(); last != nil && last.entries > 0 && last.holderBlocks > 0 {
		return min(maxSnapshotBytesPerHB, float64(last.bytes)/float64(min(last.entries, last.holderBlocks)))
	}
	return maxSnapshotBytesPerHB
}

// readSpace reads the free space and sets the pause and the budget,
// logging each change of the pause.
func (s *Store) readSpace() {
	g := &s.space
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.snapshot {
		// The snapshot's bracket set the budget (see spaceCheckEvery).
		s.setLow(s.pauses(g.budget.Load()), g.free.Load(), g.floor.Load())
		return
	}
	free, err := s.freeSpace(filepath.Join(s.dir, WALDirName))
	if err != nil {
		// Unreadable: not checked, as roomFor does not check snapshots.
		g.checked.Store(false)
		g.budget.Store(math.MaxInt64 / 2)
		if g.low.Swap(false) {
			s.logger.Warn("appends resumed: the free space can no longer be read", "err", err)
		}
		return
	}
	floor := 2 * s.walAllowance()
	if g.sharedFS {
		st := s.ix.Stats()
		floor = s.snapshotNeed(st.Entries, st.HolderBlocks) + s.walAllowance()
	}
	left := free - g.inflight.Load() - floor
	g.free.Store(free)
	g.floor.Store(floor)
	g.budget.Store(left)
	g.checked.Store(true)
	s.setLow(s.pauses(left), free, floor)
}

// pauses tells whether appends pause with left bytes above the floor: below
// it, and, once paused, until a WAL allowance is free above it again, so
// that the pause does not flap on every reading near the floor. Called
// with g.mu held.
func (s *Store) pauses(left int64) bool {
	return left < 0 || (s.space.low.Load() && left < s.walAllowance())
}

// pauseForBatch pauses appends because a batch of cost bytes does not fit
// in the budget.
func (s *Store) pauseForBatch(cost int64) {
	g := &s.space
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.low.Swap(true) {
		return
	}
	s.logger.Warn("appends paused: a batch does not fit in the free space left above the floor; events are refused (retry later) until space is freed",
		"batch_mib", mib(cost), "left_mib", mib(max(g.budget.Load(), 0)), "free_mib", mib(g.free.Load()), "floor_mib", mib(g.floor.Load()))
}

// setLow sets the pause, logging a change. Called with g.mu held.
func (s *Store) setLow(low bool, free, floor int64) {
	g := &s.space
	if g.low.Swap(low) == low {
		return
	}
	switch {
	case low:
		s.logger.Warn("appends paused: the WAL's filesystem is nearly full; events are refused (retry later) until space is freed",
			"free_mib", mib(free), "floor_mib", mib(floor))
	case g.snapshot:
		// The figures are the last reading's: the snapshot's own room
		// was below the floor, and is now what it is written in.
		s.logger.Info("appends resumed while a snapshot is written: the room kept for it is in use, and what is left above it and the WAL's allowance takes appends")
	default:
		s.logger.Info("appends resumed: free space is back", "free_mib", mib(free), "floor_mib", mib(floor))
	}
}

// beginSnapshotSpace brackets a snapshot whose room roomFor found in free
// bytes, needing need (the snapshot and one WAL allowance): appends may
// take what is left beyond that, and no reading counts the snapshot's file
// against the floor meanwhile. endSnapshotSpace ends the bracket; the next
// append reads the free space.
func (s *Store) beginSnapshotSpace(free, need int64) {
	g := &s.space
	if !g.sharedFS {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.snapshot = true
	left := free - need - g.inflight.Load()
	g.budget.Store(left)
	s.setLow(s.pauses(left), g.free.Load(), g.floor.Load())
}

func (s *Store) endSnapshotSpace() {
	g := &s.space
	g.mu.Lock()
	defer g.mu.Unlock()
	g.snapshot = false
	g.next.Store(0)
}
