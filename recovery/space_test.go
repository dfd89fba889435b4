package recovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// While the WAL's filesystem has less free space than the next snapshot
// and the WAL need, appends are refused (nothing taken, retriable) instead
// of filling the disk and fencing the log; a snapshot still fits, and
// appends resume once space is back.
func TestAppendsPauseWhileSpaceIsLow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	defer s.Close()
	var free atomic.Int64
	free.Store(1 << 40)
	var asked atomic.Value
	s.freeSpace = func(d string) (int64, error) {
		asked.Store(d)
		return free.Load(), nil
	}
	s.space.every = 0
	for _, b := range batches(3, 1, 20) {
		mustAppend(t, s, b)
	}
	free0, floor, checked := s.FreeSpace()
	if !checked || s.LowSpace() || free0 != 1<<40 || floor <= s.walAllowance() {
		t.Fatalf("space with room: free %d, floor %d, checked %v, low %v", free0, floor, checked, s.LowSpace())
	}
	if d := asked.Load(); d != filepath.Join(dir, WALDirName) {
		t.Fatalf("free space read of %v, want the WAL directory", d)
	}

	free.Store(floor - 1)
	_, last, _ := s.WALRange()
	_, _, err := s.Append(ctx, genBatch(3, 21), nil)
	switch {
	case !errors.Is(err, ErrLowSpace) || !errors.Is(err, wal.ErrOverloaded):
		t.Fatalf("append below the floor: %v, want ErrLowSpace wrapping wal.ErrOverloaded", err)
	case !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "MiB free"):
		t.Fatalf("refusal %q names neither the data dir nor the free space", err)
	case !s.LowSpace():
		t.Fatal("not LowSpace after a refusal")
	}
	if _, l, _ := s.WALRange(); l != last {
		t.Fatalf("a refused append reached the WAL: last index %d, was %d", l, last)
	}
	// The floor leaves room for a snapshot, whose retention is what can
	// free WAL segments.
	if _, idx, err := s.Snapshot(ctx); err != nil || idx != last {
		t.Fatalf("snapshot while appends pause: %d, %v", idx, err)
	}

	free.Store(1 << 40)
	mustAppend(t, s, genBatch(3, 21))
	if s.LowSpace() {
		t.Fatal("still low after space came back")
	}

	// A filesystem whose free space cannot be read is not checked.
	s.freeSpace = func(string) (int64, error) { return 0, errors.New("statfs: not supported") }
	mustAppend(t, s, genBatch(3, 22))
	if _, _, checked := s.FreeSpace(); checked || s.LowSpace() {
		t.Fatalf("unreadable free space: checked %v, low %v", checked, s.LowSpace())
	}
}

// The free space is read at most every spaceCheckEvery, not per batch.
func TestSpaceCheckIsRateLimited(t *testing.T) {
	s := mustOpen(t, t.TempDir(), testOptions())
	defer s.Close()
	var reads atomic.Int64
	s.freeSpace = func(string) (int64, error) {
		reads.Add(1)
		return 1 << 40, nil
	}
	s.space.every = spaceCheckEvery
	s.space.next.Store(0)
	start := time.Now()
	for _, b := range batches(4, 1, 50) {
		mustAppend(t, s, b)
	}
	if n, most := reads.Load(), 1+int64(time.Since(start)/spaceCheckEvery); n < 1 || n > most {
		t.Fatalf("%d free-space reads for 50 appends in %v, want 1 to %d", n, time.Since(start), most)
	}
}

// storedChain is one Stored event of n new blocks for worker w.
func storedChain(w uint64, from, n int) []engine.Event {
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: w}, Kind: engine.KindStored, EventID: uint64(from)}
	for i := range n {
		ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: uint64(from + i + 1), TokensHash: uint64(from + i + 1)})
	}
	return []engine.Event{ev}
}

// du is the bytes of the files under dir: what a filesystem of a given
// capacity has left is capacity - du.
func du(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// guardedStore returns a store that reads the free space at every append,
// holding a few blocks, and the floor its first reading found. It is
// closed when t ends.
func guardedStore(t *testing.T) (*Store, int64) {
	s := mustOpen(t, t.TempDir(), testOptions())
	t.Cleanup(func() { s.Close() })
	s.space.every = 0
	mustAppend(t, s, storedChain(1, 0, 10))
	_, floor, _ := s.FreeSpace()
	return s, floor
}

// fakeCapacity makes s see a filesystem of capacity bytes holding dir.
func fakeCapacity(t *testing.T, s *Store, dir string, capacity int64) {
	s.freeSpace = func(string) (int64, error) { return capacity - du(t, dir), nil }
}

// Appends admitted between two readings take from a budget: concurrent
// large batches cannot write past the floor before the next reading (found
// by review: 24 batches in one window wrote 14 MiB past the disk's end).
func TestAppendsBetweenReadingsStayAboveTheFloor(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	defer s.Close()
	s.space.every = 0
	mustAppend(t, s, storedChain(1, 0, 10))
	_, floor, _ := s.FreeSpace()
	fakeCapacity(t, s, dir, du(t, dir)+floor+1<<20) // 1 MiB above the floor
	s.space.every = spaceCheckEvery
	s.space.next.Store(0)
	mustAppend(t, s, storedChain(2, 1000, 1)) // the window's reading
	var (
		wg      sync.WaitGroup
		refused atomic.Int64
	)
	for w := range 24 {
		wg.Go(func() {
			if _, _, err := s.Append(ctx, storedChain(uint64(w+3), 10_000+w*200_000, 200_000), nil); errors.Is(err, ErrLowSpace) {
				refused.Add(1)
			} else if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if free, _ := s.freeSpace(dir); free < s.walAllowance() || refused.Load() == 0 {
		t.Fatalf("%d of 24 batches refused, %.1f MiB left: want some refused and at least the WAL allowance (%.1f MiB) left",
			refused.Load(), mib(free), mib(s.walAllowance()))
	}
}

// When appends pause, the snapshot whose retention may end the pause
// still fits, however much the index grew since the last reading (found
// by review: a batch that grew the index past the floor's margin left the
// pause with no snapshot to end it).
func TestPauseLeavesRoomForTheSnapshot(t *testing.T) {
	ctx := context.Background()
	s, floor := guardedStore(t)
	free := floor + 8<<20 // the disk never changes: only the index grows
	s.freeSpace = func(string) (int64, error) { return free, nil }
	for i := 0; ; i++ {
		_, _, err := s.Append(ctx, storedChain(uint64(i+2), 1000+i*10_000, 10_000), nil)
		if errors.Is(err, ErrLowSpace) {
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("append %d: %v (no pause)", i, err)
		}
		if i == 0 {
			s.space.every = spaceCheckEvery // from now on, the budget alone
		}
	}
	if _, _, err := s.Snapshot(ctx); err != nil {
		t.Fatalf("the snapshot while appends pause: %v", err)
	}
}

// nearTheFloor returns a store of 200k holder-blocks with its K = 2
// snapshots taken (the steady state), on a filesystem that has half a
// snapshot's size free above the floor. It is closed when t ends.
func nearTheFloor(t *testing.T) *Store {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	t.Cleanup(func() { s.Close() })
	s.space.every = 0
	for i := range 20 {
		mustAppend(t, s, storedChain(uint64(i+1), i*10_000, 10_000))
	}
	for i := range 2 {
		if _, _, err := s.Snapshot(context.Background()); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, storedChain(99, 1<<29+i, 1))
	}
	_, floor, _ := s.FreeSpace()
	fakeCapacity(t, s, dir, du(t, dir)+floor+s.lastSize.Load().bytes/2)
	mustAppend(t, s, storedChain(97, 1<<27, 1))
	return s
}

// A snapshot's file takes the room the floor keeps for it: appends go on
// while it is written (found by review: its bytes were counted twice, and
// every snapshot paused ingest near the floor).
func TestNoPauseWhileASnapshotIsWritten(t *testing.T) {
	ctx := context.Background()
	s := nearTheFloor(t)
	var during error
	s.hook = func(phase string, _ uint64) {
		if phase == "published" { // the new file written, the oldest not yet pruned
			_, _, during = s.Append(ctx, storedChain(96, 1<<26, 1), nil)
		}
	}
	if _, _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	s.hook = nil
	if during != nil {
		t.Fatalf("append while a snapshot is written: %v", during)
	}
	mustAppend(t, s, storedChain(95, 1<<25, 1))
}

// Snapshots on a filesystem of their own take no room of the WAL's (found
// by review: the WAL's volume paused ingest for good once the index's
// snapshot estimate outgrew it).
func TestSnapshotsOnAnotherFilesystem(t *testing.T) {
	s := mustOpen(t, t.TempDir(), testOptions())
	defer s.Close()
	s.space.every = 0
	s.space.sharedFS = false
	walRoom := 4 * s.walAllowance()
	s.freeSpace = func(d string) (int64, error) {
		if d == s.snapDir {
			return 1 << 40, nil
		}
		return walRoom, nil
	}
	for i := range 20 {
		mustAppend(t, s, storedChain(uint64(i+1), i*10_000, 10_000))
	}
	if _, floor, _ := s.FreeSpace(); floor != 2*s.walAllowance() {
		t.Fatalf("floor %.1f MiB, want two WAL allowances (%.1f MiB)", mib(floor), mib(2*s.walAllowance()))
	}
}

// A snapshot of a handful of blocks is mostly bbolt's fixed pages: scaled
// up, it estimated 200k holder-blocks at 66 GB, and a node with 8 GiB free
// paused ingest for good (found by review: the first snapshot of a fresh
// node, or its final one before a restart, is often that small).
func TestTinySnapshotDoesNotPauseIngest(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, t.TempDir(), testOptions())
	defer s.Close()
	s.freeSpace = func(string) (int64, error) { return 8 << 30, nil }
	s.space.every = 0
	mustAppend(t, s, storedChain(1, 0, 5))
	if _, _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	for w := range 200 {
		if _, _, err := s.Append(ctx, storedChain(uint64(w+2), 100+w*1000, 1000), nil); err != nil {
			t.Fatalf("after %d holder-blocks with 8 GiB free: %v", s.Index().Stats().HolderBlocks, err)
		}
	}
	if _, _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
}

// A batch refused as too large for what is left takes nothing from the
// budget: the smaller ones after it are admitted, also while a snapshot
// is written (found by review: its cost stayed taken, and every append
// paused until the snapshot ended).
func TestRefusedAppendLeavesTheBudget(t *testing.T) {
	ctx := context.Background()
	s := nearTheFloor(t)
	var big, small error
	s.hook = func(phase string, _ uint64) {
		if phase == "published" {
			_, _, big = s.Append(ctx, storedChain(96, 1<<26, 2_000_000), nil)
			_, _, small = s.Append(ctx, storedChain(95, 1<<25, 1), nil)
		}
	}
	if _, _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	s.hook = nil
	if !errors.Is(big, ErrLowSpace) || small != nil {
		t.Fatalf("during a snapshot: the big append %v (want ErrLowSpace), a one-block one after it %v (want nil)", big, small)
	}
}

// A batch that does not fit in what is left above the floor (the budget
// not yet empty) pauses appends like an empty budget: LowSpace, which
// readiness, the stats and the snapshot loop read, agrees with the refusal
// (found by drilling on a small filesystem: batches were refused while the
// node said it was ready, and no snapshot was taken). The pause holds until
// a WAL allowance is free above the floor.
func TestBatchThatDoesNotFitPauses(t *testing.T) {
	ctx := context.Background()
	s, floor := guardedStore(t)
	free := floor + 64<<10 // 64 KiB above the floor
	s.freeSpace = func(string) (int64, error) { return free, nil }
	mustAppend(t, s, storedChain(2, 100, 1)) // fits
	if s.LowSpace() {
		t.Fatal("paused with a small batch fitting")
	}
	if _, _, err := s.Append(ctx, storedChain(3, 1000, 20_000), nil); !errors.Is(err, ErrLowSpace) {
		t.Fatalf("a batch larger than what is left: %v, want ErrLowSpace", err)
	}
	if !s.LowSpace() {
		t.Fatal("a batch was refused for room, but LowSpace says appends go on")
	}
	free = floor + s.walAllowance()/2
	if _, _, err := s.Append(ctx, storedChain(4, 50_000, 1), nil); !errors.Is(err, ErrLowSpace) || !s.LowSpace() {
		t.Fatalf("half an allowance above the floor after a pause: %v, LowSpace %v; want still paused", err, s.LowSpace())
	}
	free = floor + 2*s.walAllowance()
	mustAppend(t, s, storedChain(4, 50_000, 1))
	if s.LowSpace() {
		t.Fatal("still paused with two allowances free above the floor")
	}
}

// A batch larger than the allowance a pause waits for is refused alone:
// pausing for it flapped with every retry (pause, a small append's reading
// resumes, pause again), each pause a snapshot (found by review).
func TestLargeBatchRefusedAlone(t *testing.T) {
	ctx := context.Background()
	s, floor := guardedStore(t)
	s.freeSpace = func(string) (int64, error) { return floor + 2*s.walAllowance(), nil }
	for i := range 5 {
		if _, _, err := s.Append(ctx, storedChain(uint64(100+i), 1_000_000*(i+1), 200_000), nil); !errors.Is(err, ErrLowSpace) {
			t.Fatalf("a batch larger than what is left: %v, want ErrLowSpace", err)
		}
		if s.LowSpace() {
			t.Fatalf("refusal %d of a large batch paused appends", i+1)
		}
		mustAppend(t, s, storedChain(uint64(200+i), 50_000+i*10, 1))
	}
}

// A paused store resumes only with a WAL allowance free above the floor:
// a refusal while the free space is between the two says where appends
// resume, not only where they stop (found on a small tmpfs: "12.5 MiB
// free ..., and appends stop at 11.4 MiB" read as a contradiction).
func TestRefusalAboveTheFloorNamesWhereAppendsResume(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, t.TempDir(), testOptions())
	defer s.Close()
	var free atomic.Int64
	free.Store(1 << 40)
	s.freeSpace = func(string) (int64, error) { return free.Load(), nil }
	s.space.every = 0
	mustAppend(t, s, genBatch(3, 1))
	_, floor, _ := s.FreeSpace()
	free.Store(floor - 1)
	if _, _, err := s.Append(ctx, genBatch(3, 2), nil); !errors.Is(err, ErrLowSpace) {
		t.Fatalf("append below the floor: %v, want ErrLowSpace", err)
	}
	_, floor, _ = s.FreeSpace()
	free.Store(floor + s.walAllowance()/2)
	_, _, err := s.Append(ctx, genBatch(3, 2), nil)
	if !errors.Is(err, ErrLowSpace) {
		t.Fatalf("append above the floor, less than an allowance over it, while paused: %v, want ErrLowSpace", err)
	}
	if want := fmt.Sprintf("resume at %.1f MiB", mib(floor+s.walAllowance())); !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not say %q", err, want)
	}
}

// Snapshots on a filesystem of their own need room there for the snapshot
// alone: the WAL's allowance is kept on the WAL's filesystem, and a
// snapshot that fits its own must not be refused for room the WAL never
// takes there (refused, it leaves the WAL untruncated, and a paused node
// paused).
func TestSnapshotOnAnotherFilesystemNeedsNoWALAllowanceThere(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, t.TempDir(), testOptions())
	defer s.Close()
	s.space.every = 0
	s.space.sharedFS = false
	var snapFree atomic.Int64
	snapFree.Store(1 << 40)
	s.freeSpace = func(d string) (int64, error) {
		if d == s.snapDir {
			return snapFree.Load(), nil
		}
		return 1 << 40, nil
	}
	mustAppend(t, s, storedChain(1, 0, 1000))
	st := s.Index().Stats()
	snapFree.Store(s.snapshotNeed(st.Entries, st.HolderBlocks) - s.walAllowance())
	if _, _, err := s.Snapshot(ctx); err != nil {
		t.Fatalf("snapshot with room for itself on its own filesystem: %v", err)
	}
}
