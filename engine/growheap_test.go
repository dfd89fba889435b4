package engine

import (
	"runtime"
	"testing"
	"time"
)

// fillUntilGrowing applies chains of blocks to ix until, right after an
// Apply, the grower is busy topping up the page pool.
func fillUntilGrowing(t *testing.T, ix *Index) {
	t.Helper()
	next := uint64(1)
	for round := 0; round < 2000; round++ {
		ev := Event{Worker: WorkerKey{WorkerID: uint64(round % 8)}, Kind: KindStored}
		for range 512 {
			ev.Blocks = append(ev.Blocks, Block{BlockHash: next, TokensHash: next * 31})
			next++
		}
		ev.HasStartPosition, ev.StartPosition = true, 0
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
		ix.grow.mu.Lock()
		busy := ix.grow.running && ix.grow.pagesWanted.Load() == false && len(ix.grow.pages) < sparePages/2
		ix.grow.mu.Unlock()
		if busy && len(ix.shards[0].pages) > 2 {
			return
		}
	}
	t.Skip("grower never caught busy")
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Heap in use after a collection is the index's own (README: Growth
// ahead) once WaitGrowth returned, even when the grower was busy before.
// Found by review.
func TestHeapAfterCollectionIsIndexOwn(t *testing.T) {
	ix := New()
	fillUntilGrowing(t, ix)
	ix.WaitGrowth()
	during := heapInUse()
	waitGrower(t, &ix.grow)
	after := heapInUse()
	runtime.KeepAlive(ix)
	t.Logf("heap in use after GC: %.2f MiB while the grower worked, %.2f MiB after", float64(during)/(1<<20), float64(after)/(1<<20))
	if during > after+512<<10 {
		t.Fatalf("a collection during the grower's work left %d KiB more heap in use than the index's own", (during-after)>>10)
	}
}

// fillUntilQueued applies chains of blocks to ix until, right after an
// Apply, the grower has at least n jobs queued.
func fillUntilQueued(t *testing.T, ix *Index, n int) {
	t.Helper()
	next := uint64(1)
	for round := 0; round < 4000; round++ {
		ev := Event{Worker: WorkerKey{WorkerID: uint64(round % 8)}, Kind: KindStored}
		for range 512 {
			ev.Blocks = append(ev.Blocks, Block{BlockHash: next, TokensHash: next * 31})
			next++
		}
		ev.HasStartPosition, ev.StartPosition = true, uint64(round/8)*512
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
		ix.grow.mu.Lock()
		queued := len(ix.grow.jobs)
		ix.grow.mu.Unlock()
		if queued >= n {
			t.Logf("%d jobs queued after %d blocks", queued, next-1)
			return
		}
	}
	t.Skip("grower never had the jobs queued")
}

// An index dropped by its owner, as the workload's heap figure drops it
// (ix = nil, then a collection), is collected by that collection.
func TestDroppedIndexCollectedWhileGrowing(t *testing.T) {
	ix := New()
	fillUntilQueued(t, ix, 16)
	ix.WaitGrowth()
	freed := make(chan struct{})
	runtime.AddCleanup(ix, func(ch chan struct{}) { close(ch) }, freed)
	ix = nil
	runtime.GC()
	// Cleanups run on their own goroutine after the collection: give it
	// time on a loaded machine (with -race, 50 ms was not always enough).
	select {
	case <-freed:
	case <-time.After(2 * time.Second):
		t.Fatal("a dropped index survived a collection: the grower's queued jobs hold it")
	}
}
