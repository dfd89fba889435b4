package wal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// Close is idempotent: a second Close, called while the first still
// commits what is pending, returns the first one's result once the log is
// closed (lock released), not at once.
func TestConcurrentCloseWaitsForTheFirst(t *testing.T) {
	l, entered, release := blockedLog(t, 8)
	go l.Append(context.Background(), []engine.Event{storedEvent(1, 1)}, nil)
	<-entered // the committer is in its first Write
	first := make(chan error, 1)
	go func() { first <- l.Close() }()
	for {
		l.closeMu.Lock()
		closed := l.closed
		l.closeMu.Unlock()
		if closed {
			break
		}
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { second <- l.Close() }()
	early := false
	select {
	case err := <-second:
		early = true
		t.Errorf("second Close returned %v while the first was still closing", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !early {
		select {
		case <-second:
		case <-time.After(5 * time.Second):
			t.Fatal("second Close did not return")
		}
	}
	// Both have returned: the directory is free.
	mustOpen(t, l.Dir(), nil).Close()
}

// TruncateFront racing with Close: once Close has closed the tail
// descriptor, TruncateFront must not open a new one (leaked, and making a
// later Sync fsync a closed log and succeed).
func TestTruncateFrontRacingClose(t *testing.T) {
	l := mustOpen(t, t.TempDir(), nil)
	for i := range 3 {
		if _, err := l.Append(context.Background(), []engine.Event{storedEvent(1, uint64(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	l.fdMu.Lock() // hold both where they need the descriptor
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	<-l.stopped
	time.Sleep(20 * time.Millisecond) // Close waits for fdMu, first in line
	truncated := make(chan error, 1)
	go func() { truncated <- l.TruncateFront(2) }()
	for {
		if f, _ := l.tw.FirstIndex(); f == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // TruncateFront waits for fdMu, second in line
	l.fdMu.Unlock()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-truncated // truncated on disk either way
	l.fdMu.Lock()
	leaked := l.tailFile != nil
	l.fdMu.Unlock()
	if leaked {
		t.Error("TruncateFront reopened the tail descriptor after Close")
	}
	if err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v, want ErrClosed", err)
	}
}
