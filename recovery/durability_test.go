package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// syncWatch is a WAL store that records, at each good fsync, the tail
// segment's name and size (what an OS crash would keep), and fails its
// fsyncs once fail is set.
type syncWatch struct {
	wal.Store
	dir  string
	fail atomic.Bool
	seg  atomic.Value // string
	size atomic.Int64
}

func (s *syncWatch) Sync() error {
	if s.fail.Load() {
		return syscall.EIO
	}
	if err := s.Store.Sync(); err != nil {
		return err
	}
	ents, _ := os.ReadDir(s.dir)
	var names []string
	for _, e := range ents {
		if e.Name() != wal.LockFileName {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	last := names[len(names)-1]
	fi, err := os.Stat(filepath.Join(s.dir, last))
	if err != nil {
		return err
	}
	s.seg.Store(last)
	s.size.Store(fi.Size())
	return nil
}

func watchedOptions(dir string, w **syncWatch) Options {
	opts := testOptions()
	opts.Sync, opts.SyncInterval = wal.SyncInterval, time.Hour // no interval fsync in the test
	opts.WrapStore = func(s wal.Store) wal.Store {
		*w = &syncWatch{Store: s, dir: filepath.Join(dir, WALDirName)}
		return *w
	}
	return opts
}

// Under --sync interval, a failed final fsync at Close means acknowledged
// entries may be lost: Close must say so (it returned nil, and serve
// reported a clean stop).
func TestCloseReportsFailedFinalSync(t *testing.T) {
	dir := t.TempDir()
	var w *syncWatch
	s := mustOpen(t, dir, watchedOptions(dir, &w))
	mustAppend(t, s, genBatch(1, 1)) // the first entry is fsynced at once
	mustAppend(t, s, genBatch(1, 2)) // acknowledged after write(2) only
	w.fail.Store(true)
	if err := s.Close(); !errors.Is(err, wal.ErrFenced) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close() = %v after its final fsync failed", err)
	}
}

// A snapshot must not cover entries the WAL could still lose: under --sync
// interval, an OS crash right after a snapshot kept the snapshot (fsynced)
// but not the entries it covered, and recovery refused to start (the WAL
// ended before its newest snapshot).
func TestSnapshotSyncsWALFirst(t *testing.T) {
	dir := t.TempDir()
	var w *syncWatch
	s := mustOpen(t, dir, watchedOptions(dir, &w))
	mustAppend(t, s, genBatch(1, 1))
	mustAppend(t, s, genBatch(1, 2)) // acknowledged after write(2) only
	if _, idx, err := s.Snapshot(context.Background()); err != nil || idx != 2 {
		t.Fatalf("snapshot: %d, %v", idx, err)
	}
	// An OS crash now: the WAL keeps what was fsynced.
	crash := t.TempDir()
	copyDir(t, dir, crash)
	durable, seg := w.size.Load(), w.seg.Load().(string)
	s.Close()
	os.Remove(filepath.Join(crash, WALDirName, wal.LockFileName))
	if err := os.Truncate(filepath.Join(crash, WALDirName, seg), durable); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(context.Background(), crash, testOptions())
	if err != nil {
		t.Fatalf("restart after an OS crash just after a snapshot: %v", err)
	}
	s2.Close()
}

// A snapshot recovery could not read (here: another process holds its
// lock, so bbolt times out), unlike a damaged one, stays where it is. It
// must not count among the snapshots kept: the next snapshot deleted the
// one recovery had used and truncated the WAL past it.
func TestUnreadableSnapshotNotKept(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	for b := uint64(1); b <= 20; b++ {
		mustAppend(t, s, genBatch(5, b))
		if b%10 == 0 {
			if _, _, err := s.Snapshot(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close()
	snapDir := filepath.Join(dir, SnapshotDirName)
	locked, err := os.Open(filepath.Join(snapDir, snapshot.FileName(20)))
	if err != nil {
		t.Fatal(err)
	}
	defer locked.Close()
	if err := syscall.Flock(int(locked.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, testOptions())
	if r := s.Report(); r.SnapshotUsed.Index != 10 || len(r.SnapshotsSkipped) != 1 {
		t.Fatalf("report: %+v", r)
	}
	for b := uint64(21); b <= 30; b++ {
		mustAppend(t, s, genBatch(5, b))
	}
	if _, _, err := s.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The new snapshot is damaged too: recovery needs snapshot 10 and the
	// WAL after it.
	if err := os.Truncate(filepath.Join(snapDir, snapshot.FileName(30)), 100); err != nil {
		t.Fatal(err)
	}
	s, err = Open(context.Background(), dir, testOptions())
	if err != nil {
		t.Fatalf("after a second bad snapshot: %v", err)
	}
	defer s.Close()
	if r := s.Report(); r.SnapshotUsed.Index != 10 || r.ReplayedEntries != 20 {
		t.Fatalf("report: %+v", r)
	}
}

// After a restart with nothing replayed, Snapshot returns the snapshot
// recovery loaded instead of writing the same one again.
func TestSnapshotAfterLoadWritesNothingNew(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	mustAppend(t, s, genBatch(5, 1))
	p1, i1, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fi1, _ := os.Stat(p1)
	s.Close()
	s = mustOpen(t, dir, testOptions())
	defer s.Close()
	p2, i2, err := s.Snapshot(context.Background())
	if err != nil || p2 != p1 || i2 != i1 {
		t.Fatalf("snapshot after load: %s %d %v, want %s %d", p2, i2, err, p1, i1)
	}
	if fi2, _ := os.Stat(p2); !os.SameFile(fi1, fi2) {
		t.Fatal("the loaded snapshot was written again")
	}
}
