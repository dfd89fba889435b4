package recovery

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
