package wal

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// Inspect and Scan on the directory of a live log that rolls segments over
// and truncates its front: a segment removed between listing the directory
// and reading it is not an error; every walk reports a consistent range
// and Scan yields consecutive entries.
func TestReadOnlyWalkLiveTruncation(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 300
	o.Sync = SyncNone
	l := mustOpen(t, dir, o)
	defer l.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			if _, err := l.Append(context.Background(), []engine.Event{storedEvent(1, uint64(i))}, nil); err != nil {
				t.Error(err)
				return
			}
			if i%20 == 19 {
				last, _ := l.LastIndex()
				if err := l.TruncateFront(last - 5); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		var lay Layout
		var err error
		var got []uint64
		if n%2 == 0 {
			lay, err = Inspect(dir)
		} else {
			lay, err = Scan(dir, 0, 0, func(e Entry) error { got = append(got, e.Index); return nil })
		}
		if err != nil && n%2 == 1 && len(got) > 0 && errors.Is(err, ErrTruncated) {
			// Entries Scan had yet to read were truncated meanwhile.
			continue
		}
		if err != nil {
			t.Fatalf("walk %d: %v", n, err)
		}
		if len(lay.Gaps) > 0 || len(lay.Damage) > 0 {
			t.Fatalf("walk %d: gaps %v damage %v", n, lay.Gaps, lay.Damage)
		}
		if lay.FirstIndex > lay.LastIndex+1 || lay.Entries != lay.LastIndex-lay.FirstIndex+1 {
			t.Fatalf("walk %d: first %d last %d entries %d", n, lay.FirstIndex, lay.LastIndex, lay.Entries)
		}
		for i := 1; i < len(got); i++ {
			if got[i] != got[i-1]+1 {
				t.Fatalf("walk %d: Scan yielded %d after %d", n, got[i], got[i-1])
			}
		}
	}
}

// A scan of a live log reads it as listed: a TruncateFront while it runs
// (a snapshot on the server) does not take entries it has yet to read.
func TestScanOutlivesTruncation(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 1 << 10
	l := mustOpen(t, dir, o)
	defer l.Close()
	appendN(t, l, 1, 300)
	var got []uint64
	_, err := Scan(dir, 0, 0, func(e Entry) error {
		if e.Index == 1 {
			if err := l.TruncateFront(290); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, e.Index)
		return nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	if len(got) != 300 || got[0] != 1 || got[299] != 300 {
		t.Fatalf("scan yielded %d entries, %v..%v", len(got), got[:1], got[len(got)-1:])
	}
}
