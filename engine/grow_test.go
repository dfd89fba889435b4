package engine

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
	"unsafe"
)

// waitGrower waits until g has no job queued or running.
func waitGrower(t *testing.T, g *grower) {
	t.Helper()
	done := make(chan struct{})
	go func() { g.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("grower still busy after 10 s")
	}
}

// noCollections stops automatic garbage collection for the rest of the
// test (runtime.GC still collects): one running between the grower making
// memory and the test taking it would take it back first.
func noCollections(t *testing.T) {
	old := debug.SetGCPercent(-1) // also waits for a running collection's marking
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

// held returns the memory sp holds, as a strong reference, or nil.
func held[T any](sp *spare[T]) []T {
	if w := sp.p.Load(); w != nil {
		return w.get()
	}
	return nil
}

func sameArray[T any](a, b []T) bool {
	return len(a) > 0 && len(b) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// A growth takes the memory the grower prepared for it, when it is ready
// in time: the writer asks for the size the growth will take. Removals
// shrink tables in between, so growth from shrunk sizes is covered too,
// and the answers stay exact.
func TestGrowthUsesPreparedMemory(t *testing.T) {
	ix := New()
	ix.grow.minBytes = 0
	w := WorkerKey{WorkerID: 3}
	const chain, batch = 6000, 8
	var (
		hashes []uint64
		used   int
	)
	for start := 0; start < chain; start += batch {
		ev := Event{Worker: w, Kind: KindStored}
		if start > 0 {
			ev.HasParent, ev.ParentHash = true, uint64(start)
		}
		for i := start + 1; i <= start+batch; i++ {
			ev.Blocks = append(ev.Blocks, Block{BlockHash: uint64(i), TokensHash: uint64(i) * 7})
			hashes = append(hashes, uint64(i)*7)
		}
		// What the grower made, held strongly so that no collection takes it.
		waitGrower(t, &ix.grow)
		var (
			tables [shardCount][]uint64
			sizes  [shardCount]int
			rev    []revSlot
			size   int
		)
		for si := range ix.shards {
			tables[si], sizes[si] = held(&ix.shards[si].spare), len(ix.shards[si].table)
		}
		if _, wk := ix.worker(w); wk != nil {
			rev, size = held(&wk.revSpare), len(wk.rev.slots)
		}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
		for si := range ix.shards {
			s := &ix.shards[si]
			if len(s.table) > sizes[si] && len(tables[si]) == len(s.table) {
				used++
				if !sameArray(tables[si], s.table) {
					t.Fatalf("block %d: shard %d grew to %d slots, not into the table prepared for it", start, si, len(s.table))
				}
			}
		}
		if _, wk := ix.worker(w); len(wk.rev.slots) > size && len(rev) == len(wk.rev.slots) {
			used++
			if !sameArray(rev, wk.rev.slots) {
				t.Fatalf("block %d: reverse map grew to %d slots, not into the map prepared for it", start, len(wk.rev.slots))
			}
		}
		// Another worker comes and goes, so that tables shrink and grow again.
		if n := start / batch; n%50 == 49 {
			churn := Event{Worker: WorkerKey{WorkerID: 4}, Kind: KindStored}
			if n%100 == 99 {
				churn.Kind = KindCleared
			}
			for i := range 600 {
				churn.Blocks = append(churn.Blocks, Block{BlockHash: uint64(1e6 + i), TokensHash: uint64(1e6 + i)})
			}
			if err := ix.Apply(&churn); err != nil {
				t.Fatal(err)
			}
		}
		if start%(25*batch) == 0 {
			if err := ix.Verify(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	if used < 15 {
		t.Fatalf("only %d growths took prepared memory", used)
	}
	res := ix.Match(hashes, nil)
	if len(res) != 1 || res[0].MatchedBlocks != chain {
		t.Fatalf("match of the whole chain: %+v, want %d blocks", res, chain)
	}
}

// Prepared memory is zeroed, of the size asked, taken once, refused at
// another size, and gone after a collection if nobody claimed it.
func TestSpare(t *testing.T) {
	noCollections(t)
	g := newGrower()
	g.minBytes = 0
	tests := []struct {
		name    string
		collect bool
		ask     int
		want    bool
	}{
		{"taken", false, 1000, true},
		{"other size", false, 999, false},
		{"collected", true, 1000, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sp spare[uint64]
			prepare(&g, &sp, 1000, 8)
			waitGrower(t, &g)
			if tc.collect {
				runtime.GC()
				runtime.GC()
			}
			buf := sp.take(tc.ask)
			if got := buf != nil; got != tc.want {
				t.Fatalf("take(%d) gave memory: %v, want %v", tc.ask, got, tc.want)
			}
			for i, v := range buf {
				if v != 0 {
					t.Fatalf("slot %d is %d, want 0", i, v)
				}
			}
			if len(buf) > 0 && len(buf) != tc.ask {
				t.Fatalf("take(%d) gave %d elements", tc.ask, len(buf))
			}
			if again := sp.take(1000); again != nil {
				t.Fatal("a spare was taken twice")
			}
		})
	}
}

// The page pool hands out zeroed pages and tops itself up.
func TestPagePool(t *testing.T) {
	noCollections(t)
	g := newGrower()
	if pg := g.page(); pg != nil {
		t.Fatal("a new pool had a page")
	}
	waitGrower(t, &g)
	if n := len(g.pages); n != sparePages {
		t.Fatalf("pool holds %d pages after a top-up, want %d", n, sparePages)
	}
	pg := g.page()
	if len(pg) != pageSize {
		t.Fatalf("page of %d places, want %d", len(pg), pageSize)
	}
	for i := range pg {
		if pg[i] != (place{}) {
			t.Fatalf("place %d of a pooled page is %+v", i, pg[i])
		}
	}
	waitGrower(t, &g)
}
