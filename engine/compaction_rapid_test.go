package engine

import (
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// fillerChain is a chain of places all in shard 0, long enough that
// clearing it makes shard 0 due for compaction; every shard with a
// sixteenth of its slots free is compacted with it, so the small places of
// a property run move too.
var fillerChain = sync.OnceValue(func() []uint64 {
	ths := make([]uint64, compactMinFree+64)
	for i := range ths {
		ths[i] = thsInShard(0, uint32(i), 1, 1<<40)[0]
	}
	return ths
})

var filler = WorkerKey{WorkerID: 99}

// genEventOrFiller is genEvent, now and then the filler's store, or a
// removal of it (by Cleared, WorkerRemoved or a Removed event of its
// blocks in either order) that compacts.
func genEventOrFiller(t *rapid.T) Event {
	if rapid.IntRange(0, 9).Draw(t, "filler") != 0 {
		return genEvent(t)
	}
	st := chain(filler, nil, fillerChain()...)
	switch rapid.IntRange(0, 4).Draw(t, "filler_kind") {
	case 0, 1:
		return st
	case 2:
		return Event{Worker: filler, Kind: KindCleared}
	case 3:
		return Event{Worker: filler, Kind: KindWorkerRemoved}
	}
	r := removed(filler, st)
	if rapid.Bool().Draw(t, "reverse") {
		slices.Reverse(r.BlockHashes)
	}
	return r
}

// Random streams with compactions among them: after every step the index
// equals the model, its invariants hold, and a frozen copy loads into an
// index that does too.
func TestIndexMatchesModelThroughCompaction(t *testing.T) {
	queries := allQueries()
	compactions := 0
	rapid.Check(t, func(t *rapid.T) {
		ix, ref := New(), newModel()
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for step := range steps {
			ev := genEventOrFiller(t)
			before := ix.shards[0].nextNew
			errIx, errRef := ix.Apply(&ev), ref.Apply(&ev)
			if ix.shards[0].nextNew < before {
				compactions++
			}
			if RejectReason(errIx) != RejectReason(errRef) {
				t.Fatalf("step %d %v: index error %v, model error %v", step, ev.Kind, errIx, errRef)
			}
			checkStep(t, step, &ev, ix, ref, queries)
		}
	})
	if compactions == 0 {
		t.Fatal("no compaction ran")
	}
	t.Logf("%d compactions", compactions)
}

// checkStep fails unless ix, after step (event ev), keeps its invariants and
// answers as the model does; now and then it also checks that a frozen copy
// of ix loads into an index that answers alike.
func checkStep(t *rapid.T, step int, ev *Event, ix *Index, ref *model, queries [][]uint64) {
	if err := ix.Verify(); err != nil {
		t.Fatalf("step %d %v: invariants: %v", step, ev.Kind, err)
	}
	if got, want := ix.Stats(), ref.Stats(); got != want {
		t.Fatalf("step %d %v: stats %+v, model %+v", step, ev.Kind, got, want)
	}
	if got, want := ix.Workers(), ref.Workers(); !slices.Equal(got, want) {
		t.Fatalf("step %d: workers %v, model %v", step, got, want)
	}
	for _, q := range queries {
		if got, want := ix.Match(q, nil), ref.Match(q, nil); !slices.Equal(got, want) {
			t.Fatalf("step %d %v: query %v: scores %v, model %v", step, ev.Kind, q, got, want)
		}
	}
	if rapid.IntRange(0, 7).Draw(t, "reload") == 0 {
		got := reload(t, ix)
		if err := got.Verify(); err != nil {
			t.Fatalf("step %d: loaded: %v", step, err)
		}
		for _, q := range queries {
			if a, b := got.Match(q, nil), ix.Match(q, nil); !slices.Equal(a, b) {
				t.Fatalf("step %d: loaded, query %v: %v, original %v", step, q, a, b)
			}
		}
	}
}
