package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// onceFailStore fails the first fsync (after blocking in it until release
// is closed) and lets every later one succeed: that is what Linux does to
// a descriptor whose writeback failed (the error is reported once; the
// next fsync returns 0 although the pages the failure dropped are gone).
type onceFailStore struct {
	next     Store
	err      error
	entered  chan struct{}
	release  chan struct{}
	syncs    atomic.Int32
	afterErr atomic.Int32 // fsyncs that succeeded after the failed one
}

func (s *onceFailStore) Write(index uint64, data []byte) error {
	return s.next.Write(index, data)
}

func (s *onceFailStore) Sync() error {
	if s.syncs.Add(1) == 1 {
		close(s.entered)
		<-s.release
		return s.err
	}
	if err := s.next.Sync(); err != nil {
		return err
	}
	s.afterErr.Add(1)
	return nil
}

func openOnceFail(t *testing.T, o *Options) (*Log, *onceFailStore) {
	t.Helper()
	st := &onceFailStore{err: errors.New("injected EIO"), entered: make(chan struct{}), release: make(chan struct{})}
	o.WrapStore = func(s Store) Store { st.next = s; return st }
	return mustOpen(t, t.TempDir(), o), st
}

// Under SyncAlways, the syncer's fsync fails while a Sync (before a
// snapshot) waits for the descriptor: the entry is not acknowledged, and
// that Sync must not report the log durable either (its own fsync would
// succeed, proving nothing after a failure).
func TestSyncAfterFailedSyncerSync(t *testing.T) {
	o := quietOpts()
	var applied atomic.Int32
	o.OnCommit = func(Entry) []error { applied.Add(1); return nil }
	l, st := openOnceFail(t, o)
	defer l.Close()
	appendErr := make(chan error, 1)
	go func() {
		_, err := l.Append(context.Background(), []engine.Event{storedEvent(1, 1)}, nil)
		appendErr <- err
	}()
	<-st.entered // the syncer's fsync of the entry holds the descriptor, and will fail
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }()
	time.Sleep(50 * time.Millisecond) // Sync waits for the descriptor
	close(st.release)
	if err := <-appendErr; !errors.Is(err, ErrFenced) || !errors.Is(err, st.err) {
		t.Errorf("append whose fsync failed: %v", err)
	}
	if n := applied.Load(); n != 0 {
		t.Errorf("entry applied after its fsync failed")
	}
	if err := <-syncErr; !errors.Is(err, ErrFenced) {
		t.Errorf("Sync after a failed fsync of the same entries: %v, want ErrFenced", err)
	}
	if n := st.afterErr.Load(); n != 0 {
		t.Errorf("%d fsyncs after the failed one", n)
	}
}

// Under SyncInterval, the committer's fsync fails while a Sync (before a
// snapshot) waits for the descriptor: that Sync must not report the log
// durable, or a snapshot would cover entries an OS crash can take.
func TestSyncAfterFailedIntervalSync(t *testing.T) {
	o := quietOpts()
	o.Sync = SyncInterval
	l, st := openOnceFail(t, o)
	defer l.Close()
	// The first entry is acknowledged after its write; the committer then
	// fsyncs at once (no fsync yet), and that fsync will fail.
	if _, err := l.Append(context.Background(), []engine.Event{storedEvent(1, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	<-st.entered
	syncErr := make(chan error, 1)
	go func() { syncErr <- l.Sync() }()
	time.Sleep(50 * time.Millisecond) // Sync waits for the descriptor
	close(st.release)
	if err := <-syncErr; !errors.Is(err, ErrFenced) {
		t.Errorf("Sync after a failed fsync of the same entries: %v, want ErrFenced", err)
	}
	if n := st.afterErr.Load(); n != 0 {
		t.Errorf("%d fsyncs after the failed one", n)
	}
}

// Under SyncInterval, an entry acknowledged just before a write failure
// (ENOSPC) is fsynced at once: the fenced log syncs nothing more, so it
// stayed unsynced until shutdown, beyond the documented loss window (found
// by review).
func TestIntervalAckedSyncedAfterWriteFence(t *testing.T) {
	o := quietOpts()
	o.Sync = SyncInterval
	o.SyncInterval = time.Hour // only the write failure syncs
	hs := &hookStore{}
	l := openHooked(t, t.TempDir(), o, hs)
	defer l.Close()
	ctx := context.Background()
	// The first entry is synced at once (no sync yet), after its producer
	// is answered; the second waits for the interval.
	if _, err := l.Append(ctx, []engine.Event{storedEvent(1, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	for hs.synced.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	idx, err := l.Append(ctx, []engine.Event{storedEvent(1, 2)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if hs.synced.Load() >= idx {
		t.Fatal("synced before the interval")
	}
	var enospc error = syscall.ENOSPC
	hs.failWrite.Store(&enospc)
	if _, err := l.Append(ctx, []engine.Event{storedEvent(1, 3)}, nil); !errors.Is(err, ErrFenced) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full disk: %v", err)
	}
	if s := hs.synced.Load(); s < idx {
		t.Errorf("entry %d, acknowledged before the failed write, not fsynced (synced up to %d)", idx, s)
	}
}

// A rollover on a full disk can leave a new, empty last segment (created,
// neither fill nor entry written): the log reopens and appends after it.
func TestEmptyLastSegment(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 4096
	l := mustOpen(t, dir, o)
	ctx := context.Background()
	for i := range 50 {
		if _, err := l.Append(ctx, []engine.Event{storedEvent(1, uint64(i+1))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	last, _ := l.LastIndex()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, fmt.Sprintf("%020d", last+1))
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(p, nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, dir, o)
	if n, _ := l.LastIndex(); n != last {
		t.Fatalf("last %d, want %d", n, last)
	}
	if _, err := l.Append(ctx, []engine.Event{storedEvent(2, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, o)
	defer l.Close()
	if got := len(readAll(t, l, 0)); got != int(last)+1 {
		t.Fatalf("read %d entries, want %d", got, last+1)
	}
}
