package engine

import (
	"context"
	"testing"

	"pgregory.net/rapid"
)

// checkReserved fails unless every table, slab and reverse map is at least
// its reserved size.
func checkReserved(t interface{ Fatalf(string, ...any) }, ix *Index) {
	for si := range ix.shards {
		s := &ix.shards[si]
		if len(s.table) < s.floor || len(s.pages) < s.pageFloor {
			t.Fatalf("shard %d: table %d slots (reserved %d), %d pages (reserved %d)", si, len(s.table), s.floor, len(s.pages), s.pageFloor)
		}
	}
	reserved := 0
	for _, w := range ix.workers {
		if w != nil && w.rev.floor > 0 {
			reserved++
			if len(w.rev.slots) < w.rev.floor {
				t.Fatalf("worker %v: reverse map of %d slots, reserved %d", w.key, len(w.rev.slots), w.rev.floor)
			}
		}
	}
	if reserved != ix.revReserved || reserved+len(ix.revSpare) > ix.revKeys {
		t.Fatalf("%d reserved reverse maps (counted %d) and %d spare, %d worker keys reserved", reserved, ix.revReserved, len(ix.revSpare), ix.revKeys)
	}
}

// cancelAfter is a context whose Err says canceled after checks calls.
type cancelAfter struct {
	context.Context
	checks int
}

func (c *cancelAfter) Err() error {
	if c.checks <= 0 {
		return context.Canceled
	}
	c.checks--
	return nil
}

// A Reserve stopped by its context returns the context's error.
func TestReserveStops(t *testing.T) {
	ix := New()
	ctx := &cancelAfter{Context: context.Background(), checks: 10}
	if err := ix.Reserve(ctx, 1<<20, 8); err != context.Canceled {
		t.Fatalf("Reserve cut short: %v, want context.Canceled", err)
	}
	checkReserved(t, ix)
	if err := ix.Reserve(context.Background(), 1<<20, 8); err != nil {
		t.Fatal(err)
	}
	checkReserved(t, ix)
}

// A reserved index answers exactly as the model does, whenever the
// reservation is made (before any event, or with blocks held), through
// compactions and reloads, and its reserved memory stays.
func TestReservedIndexMatchesModel(t *testing.T) {
	queries := allQueries()
	rapid.Check(t, func(t *rapid.T) {
		ix, ref := New(), newModel()
		reserve := func(label string) {
			// Small reservations, and one of three pages a shard, more than
			// the filler's 1,088 places in shard 0, so that compaction meets
			// reserved pages.
			hbs := rapid.SampledFrom([]int{0, 1, 40, 3000, 200000}).Draw(t, label+"_blocks")
			keys := rapid.IntRange(0, 5).Draw(t, label+"_keys")
			// Some reservations are cut short (kvidx serve stopped while
			// it reserves): the index stays correct.
			ctx := context.Context(context.Background())
			if rapid.Bool().Draw(t, label+"_cut") {
				ctx = &cancelAfter{Context: ctx, checks: rapid.IntRange(0, 300).Draw(t, label+"_checks")}
			}
			_ = ix.Reserve(ctx, hbs, keys)
			checkReserved(t, ix)
		}
		reserve("first")
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for step := range steps {
			if rapid.IntRange(0, 9).Draw(t, "reserve_now") == 0 {
				reserve("later")
			}
			ev := genEventOrFiller(t)
			errIx, errRef := ix.Apply(&ev), ref.Apply(&ev)
			if RejectReason(errIx) != RejectReason(errRef) {
				t.Fatalf("step %d %v: index error %v, model error %v", step, ev.Kind, errIx, errRef)
			}
			checkReserved(t, ix)
			checkStep(t, step, &ev, ix, ref, queries)
		}
	})
}

// Memory reserved for blocks and worker keys is mapped at once, kept when
// the blocks and workers leave, and used by the next ones: nothing resizes.
func TestReserveKeepsMemory(t *testing.T) {
	const workers, perWorker = 4, 3000
	ix := New()
	// Twice the blocks stored: some shards get more than their share.
	ix.Reserve(context.Background(), 2*workers*perWorker, workers)
	ix.Reserve(context.Background(), workers*perWorker, workers) // smaller: nothing changes
	if b, k := ix.Reserved(); b != 2*workers*perWorker || k != workers {
		t.Fatalf("Reserved() = %d, %d", b, k)
	}
	tables := make([]int, shardCount)
	for si := range ix.shards {
		tables[si] = len(ix.shards[si].table)
	}
	if got := len(ix.revSpare); got != workers {
		t.Fatalf("%d spare reverse maps after reserving %d worker keys", got, workers)
	}
	sameTables := func(when string) {
		t.Helper()
		for si := range ix.shards {
			if got := len(ix.shards[si].table); got != tables[si] {
				t.Fatalf("%s: shard %d table of %d slots, reserved %d", when, si, got, tables[si])
			}
		}
	}
	var stores []Event
	for w := range workers {
		ths := make([]uint64, perWorker)
		for i := range ths {
			ths[i] = uint64(w*perWorker + i + 1)
		}
		stores = append(stores, chain(WorkerKey{WorkerID: uint64(w)}, nil, ths...))
	}
	apply(t, ix, stores...)
	if len(ix.revSpare) != 0 {
		t.Fatalf("%d spare reverse maps with every reserved worker key present", len(ix.revSpare))
	}
	for _, w := range ix.workers {
		if len(w.rev.slots) != ix.revFloor {
			t.Fatalf("worker %v: reverse map of %d slots, reserved %d", w.key, len(w.rev.slots), ix.revFloor)
		}
	}
	sameTables("stored")
	checkReserved(t, ix)
	// Every block leaves, by each removal path.
	apply(t, ix,
		removed(WorkerKey{WorkerID: 0}, stores[0]),
		Event{Worker: WorkerKey{WorkerID: 1}, Kind: KindCleared},
		Event{Worker: WorkerKey{WorkerID: 2}, Kind: KindWorkerRemoved},
		Event{Worker: WorkerKey{WorkerID: 3}, Kind: KindWorkerRemoved},
	)
	if ix.Len() != 0 {
		t.Fatalf("%d entries after every block left", ix.Len())
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	sameTables("emptied")
	checkReserved(t, ix)
	if got := len(ix.revSpare); got != workers {
		t.Fatalf("%d spare reverse maps after every worker left, want %d", got, workers)
	}
	for _, s := range ix.revSpare {
		for i, slot := range s {
			if slot != (revSlot{}) {
				t.Fatalf("a spare reverse map keeps slot %d: %+v", i, slot)
			}
		}
	}
	// The next worker takes a spare map and answers as usual.
	apply(t, ix, stores[0])
	if len(ix.revSpare) != workers-1 {
		t.Fatalf("%d spare reverse maps after a worker came back, want %d", len(ix.revSpare), workers-1)
	}
	var query []uint64
	for _, b := range stores[0].Blocks {
		query = append(query, b.TokensHash)
	}
	if got := ix.Match(query, nil); len(got) != 1 || got[0].MatchedBlocks != perWorker {
		t.Fatalf("scores %v after storing again", got)
	}
	sameTables("stored again")
	checkReserved(t, ix)
}

// Worker keys beyond the reservation get reverse maps that grow as usual,
// not reserved ones (a reservation per worker id, with DP ranks as keys,
// would otherwise multiply its memory).
func TestReserveBeyondWorkerKeys(t *testing.T) {
	ix := New()
	ix.Reserve(context.Background(), 1<<20, 2)
	for w := range 6 {
		apply(t, ix, chain(WorkerKey{WorkerID: uint64(w)}, nil, uint64(w+1)))
	}
	checkReserved(t, ix)
	plain := 0
	for _, w := range ix.workers {
		if w.rev.floor == 0 {
			plain++
			if len(w.rev.slots) > minTable {
				t.Errorf("worker %v beyond the reservation: reverse map of %d slots", w.key, len(w.rev.slots))
			}
		}
	}
	if plain != 4 {
		t.Fatalf("%d of 6 worker keys without a reserved map, want 4", plain)
	}
	// A reserved key leaves: its map is kept for the next key, not for a
	// present key beyond the reservation.
	apply(t, ix, Event{Worker: WorkerKey{WorkerID: 0}, Kind: KindCleared})
	checkReserved(t, ix)
	if len(ix.revSpare) != 1 {
		t.Fatalf("%d spare maps after a reserved key left", len(ix.revSpare))
	}
	apply(t, ix, chain(WorkerKey{WorkerID: 9}, nil, 9))
	checkReserved(t, ix)
	if w := ix.workers[ix.byKey[WorkerKey{WorkerID: 9}]]; w.rev.floor == 0 || len(ix.revSpare) != 0 {
		t.Fatalf("the next key got floor %d, %d spares left", w.rev.floor, len(ix.revSpare))
	}
}

// A snapshot copies the pages that hold places, not the reserved ones.
func TestFreezeSkipsReservedPages(t *testing.T) {
	ix := New()
	ix.Reserve(context.Background(), 1<<20, 8)
	f := ix.Freeze()
	for si := range f.pages {
		if len(f.pages[si]) != 0 {
			t.Fatalf("shard %d: %d pages copied from an empty index", si, len(f.pages[si]))
		}
	}
	apply(t, ix, chain(WorkerKey{WorkerID: 1}, nil, 1, 2, 3))
	f = ix.Freeze()
	pages := 0
	for si := range f.pages {
		pages += len(f.pages[si])
	}
	if pages == 0 || pages > 3 {
		t.Fatalf("%d pages copied for 3 places", pages)
	}
	if got := reload(t, ix); got.Len() != 3 {
		t.Fatalf("reloaded %d entries, want 3", got.Len())
	}
}

func TestReserveNothing(t *testing.T) {
	for _, c := range []struct{ blocks, keys int }{{0, 0}, {0, 4}, {100, 0}, {-1, 4}, {100, -1}} {
		ix := New()
		ix.Reserve(context.Background(), c.blocks, c.keys)
		if b, k := ix.Reserved(); b != 0 || k != 0 {
			t.Fatalf("Reserve(%d, %d): Reserved() = %d, %d", c.blocks, c.keys, b, k)
		}
		if ix.revFloor != 0 || len(ix.revSpare) != 0 || len(ix.shards[0].table) != 0 || len(ix.shards[0].pages) != 0 {
			t.Fatalf("Reserve(%d, %d) reserved memory", c.blocks, c.keys)
		}
	}
}
