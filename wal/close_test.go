package wal

import (
	"context"
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
