package wal

import (
	"context"
	"errors"
	"sync/atomic"
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
