package engine

import (
	"runtime"
	"testing"
	"time"
)

// fillUntil applies chains of blocks to ix until, right after an Apply,
// the grower is in the state done looks for (skipping the test if it never
// is).
func fillUntil(t *testing.T, ix *Index, what string, done func() bool) {
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
		ok := done()
		ix.grow.mu.Unlock()
		if ok {
			return
		}
	}
	t.Skip("the grower was never seen " + what)
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
	fillUntil(t, ix, "topping up the page pool", func() bool {
		g := &ix.grow
		return g.running && !g.pagesWanted.Load() && len(g.pages) < sparePages/2 && len(ix.shards[0].pages) > 2
	})
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

// An index dropped by its owner, as the workload's heap figure drops it
// (ix = nil, then a collection), is collected by that collection.
func TestDroppedIndexCollectedWhileGrowing(t *testing.T) {
	ix := New()
	fillUntil(t, ix, "with 16 jobs queued", func() bool { return len(ix.grow.jobs) >= 16 })
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
