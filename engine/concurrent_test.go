package engine

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// Queries and snapshots run while events apply (run under -race): no data
// race, no panic, and at the end the index equals the model fed the same
// events.
func TestConcurrentReadsAndWrites(t *testing.T) {
	ix, ref := New(), newModel()
	rng := rand.New(rand.NewPCG(1, 2))
	var events []Event
	for range 3000 {
		w := WorkerKey{WorkerID: rng.Uint64N(8), DPRank: uint32(rng.IntN(2))}
		ths := make([]uint64, 1+rng.IntN(12))
		for i := range ths {
			ths[i] = 1 + rng.Uint64N(3)
		}
		ev := chain(w, nil, ths...)
		events = append(events, ev)
		switch rng.IntN(6) {
		case 0:
			events = append(events, Event{Worker: w, Kind: KindCleared})
		case 1, 2:
			r := removed(w, ev)
			rng.Shuffle(len(r.BlockHashes), func(i, j int) { r.BlockHashes[i], r.BlockHashes[j] = r.BlockHashes[j], r.BlockHashes[i] })
			r.BlockHashes = r.BlockHashes[:rng.IntN(len(r.BlockHashes)+1)]
			events = append(events, r)
		}
	}
	queries := [][]uint64{{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 2, 3, 1, 2, 3}, {2, 2, 2, 2}, {3}}
	var done atomic.Bool
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				q := queries[(i+r)%len(queries)]
				for _, s := range ix.Match(q, nil) {
					if s.MatchedBlocks < 1 || s.MatchedBlocks > len(q) {
						t.Errorf("score %v out of range for a %d-block query", s, len(q))
						return
					}
				}
				_ = ix.Len()
			}
		}()
	}
	// Snapshots too, two at a time: each copy is consistent (its places
	// hold exactly the holder-blocks its stats count), however the index
	// grows in between.
	for range 2 {
		wg.Add(1)
		go freezeUntil(t, ix, &done, &wg)
	}
	var writers sync.WaitGroup
	writers.Add(1)
	go func() {
		defer writers.Done()
		for i := range events {
			_ = ix.Apply(&events[i])
		}
	}()
	writers.Wait()
	done.Store(true)
	wg.Wait()
	for i := range events {
		_ = ref.Apply(&events[i])
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	if ix.Stats() != ref.Stats() {
		t.Fatalf("stats %+v, model %+v", ix.Stats(), ref.Stats())
	}
	for _, q := range queries {
		if got, want := ix.Match(q, nil), ref.Match(q, nil); !slices.Equal(got, want) {
			t.Fatalf("query %v: %v, model %v", q, got, want)
		}
	}
}

// freezeUntil freezes ix, checks and releases the copy, until done.
func freezeUntil(t *testing.T, ix *Index, done *atomic.Bool, wg *sync.WaitGroup) {
	defer wg.Done()
	for !done.Load() {
		f := ix.Freeze()
		hb := 0
		f.Places(func(r *PlaceRecord) bool {
			for _, h := range r.Holders {
				hb += len(h.BlockHashes)
			}
			return true
		})
		if hb != f.Stats().HolderBlocks {
			t.Errorf("frozen places hold %d holder-blocks, its stats %d", hb, f.Stats().HolderBlocks)
			return
		}
		f.Release(ix)
	}
}
