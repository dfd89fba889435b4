package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

// fakeStore applies appended events straight to an engine.Index, one batch
// at a time, like the WAL's committer; it can simulate overload, fencing
// and snapshot failures.
type fakeStore struct {
	ix *engine.Index

	mu        sync.Mutex
	index     uint64
	appends   int
	snaps     int
	fenced    bool
	torn      int64
	snapIndex uint64

	overloaded atomic.Bool
	lowSpace   atomic.Bool   // appends pause as recovery.Store's do on a nearly full disk
	pausedFree atomic.Int64  // free bytes FreeSpace reports while paused (0: 1 MiB)
	failFence  atomic.Bool   // the next Append fails and fences
	hold       chan struct{} // when set, Append waits for it to be closed
	snapErr    atomic.Value  // error (wrapped in errBox) or nil
}

// errBox holds Snapshot's error; published: the snapshot is published
// and the error is of the pruning or truncation after it.
type errBox struct {
	err       error
	published bool
}

func newFakeStore() *fakeStore { return &fakeStore{ix: engine.New()} }

func (f *fakeStore) Index() *engine.Index { return f.ix }

func (f *fakeStore) Append(ctx context.Context, events []engine.Event, _ []wal.Position) (uint64, []error, error) {
	if f.hold != nil {
		<-f.hold
	}
	if f.overloaded.Load() {
		return 0, nil, fmt.Errorf("fake wal: %w", wal.ErrOverloaded)
	}
	if f.lowSpace.Load() {
		return 0, nil, fmt.Errorf("fake store: 1.0 MiB free, below the 9.0 MiB kept: %w", recovery.ErrLowSpace)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failFence.Load() {
		f.fenced = true
	}
	if f.fenced {
		return 0, nil, fmt.Errorf("fake wal: %w: write: no space left on device", wal.ErrFenced)
	}
	f.index++
	f.appends++
	results := make([]error, len(events))
	for i := range events {
		results[i] = f.ix.Apply(&events[i])
	}
	return f.index, results, nil
}

func (f *fakeStore) Snapshot(ctx context.Context) (string, uint64, error) {
	b, _ := f.snapErr.Load().(errBox)
	if b.err != nil && !b.published {
		return "", 0, b.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snaps++
	f.snapIndex = f.index
	return fmt.Sprintf("/fake/snapshot-%020d.bolt", f.index), f.index, b.err
}

func (f *fakeStore) Applied() (uint64, []wal.Position) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.index, nil
}

func (f *fakeStore) WALStats() wal.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return wal.Stats{Fenced: f.fenced, TornBytesDropped: f.torn, Entries: f.index}
}

func (f *fakeStore) WALRange() (uint64, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.index == 0 {
		return 0, 0, nil
	}
	return 1, f.index, nil
}

func (f *fakeStore) LowSpace() bool { return f.lowSpace.Load() }

func (f *fakeStore) FreeSpace() (free, floor int64, checked bool) {
	if f.lowSpace.Load() {
		if free := f.pausedFree.Load(); free > 0 {
			return free, 9 << 20, true
		}
		return 1 << 20, 9 << 20, true
	}
	return 100 << 20, 9 << 20, true
}

func (f *fakeStore) counts() (appends, snaps int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appends, f.snaps
}
