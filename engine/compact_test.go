package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A large index that shrinks is compacted: its pages are returned, every
// reference to a moved place is rewritten, and answers do not change.
func TestCompactionAfterShrink(t *testing.T) {
	ix, ref := New(), newModel()
	rng := rand.New(rand.NewPCG(3, 4))
	var stores []Event
	var queries [][]uint64
	for i := range 6000 {
		w := WorkerKey{WorkerID: uint64(i % 16)}
		ths := make([]uint64, 20)
		for j := range ths {
			ths[j] = uint64(rng.IntN(1 << 20))
		}
		ths[0] = uint64(i % 50) // shared roots: many holders per root place
		ev := chain(w, nil, ths...)
		stores = append(stores, ev)
		queries = append(queries, ths)
	}
	for i := range stores {
		_ = ix.Apply(&stores[i])
		_ = ref.Apply(&stores[i])
	}
	pagesBefore := 0
	for i := range ix.shards {
		pagesBefore += len(ix.shards[i].pages)
	}
	// Remove 90% of the chains, tails first for some, heads first for others.
	for i := range stores {
		if i%10 == 0 {
			continue
		}
		r := removed(stores[i].Worker, stores[i])
		if i%2 == 0 {
			slices.Reverse(r.BlockHashes)
		}
		_ = ix.Apply(&r)
		_ = ref.Apply(&r)
	}
	pagesAfter := 0
	for i := range ix.shards {
		s := &ix.shards[i]
		pagesAfter += len(s.pages)
		if want := s.places>>pageBits + 1; len(s.pages) > want {
			t.Errorf("shard %d: %d pages for %d places, want %d", i, len(s.pages), s.places, want)
		}
	}
	if pagesAfter >= pagesBefore {
		t.Errorf("pages %d -> %d: compaction did not return memory", pagesBefore, pagesAfter)
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	if ix.Stats() != ref.Stats() {
		t.Fatalf("stats %+v, model %+v", ix.Stats(), ref.Stats())
	}
	for _, q := range queries {
		if got, want := ix.Match(q, nil), ref.Match(q, nil); !slices.Equal(got, want) {
			t.Fatalf("query %v: %v, model %v", q[:3], got, want)
		}
	}
	// The index keeps working on compacted shards.
	for i := range stores {
		if i%10 != 0 {
			_ = ix.Apply(&stores[i])
			_ = ref.Apply(&stores[i])
		}
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, q := range queries[:500] {
		if got, want := ix.Match(q, nil), ref.Match(q, nil); !slices.Equal(got, want) {
			t.Fatalf("after refill, query %v: %v, model %v", q[:3], got, want)
		}
	}
}

// More children of one place than a holder's packed kids field counts.
func TestManyKidsOfOnePlace(t *testing.T) {
	ix := New()
	apply(t, ix, chain(w0, nil, 1))
	var kids []Event
	for th := uint64(2); th < 2+kidsMax+300; th++ {
		ev := chain(w0, []uint64{1}, th)
		kids = append(kids, ev)
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range kids[:400] {
		r := removed(w0, ev)
		if err := ix.Apply(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	if got := scoreOf(ix, w0, 1, kids[500].Blocks[0].TokensHash); got != 2 {
		t.Fatalf("score %d, want 2", got)
	}
	if ix.isLinear(0) {
		t.Fatal("a worker without holes was flagged for linear scoring")
	}
	// Removing the parent orphans the rest: the worker now has holes.
	apply(t, ix, Event{Worker: w0, Kind: KindRemoved, BlockHashes: []uint64{1}})
	if got := scoreOf(ix, w0, 1, kids[500].Blocks[0].TokensHash); got != 0 {
		t.Fatalf("score %d after the root went, want 0", got)
	}
}

// Compaction keeps every live place, whatever page boundary the live count
// ends at (a shard whose live places filled its last page exactly lost that
// page's places once).
func TestCompactAtPageBoundaries(t *testing.T) {
	for _, live := range []int{1, pageSize - 2, pageSize - 1, pageSize, pageSize + 1, 2*pageSize - 1, 2 * pageSize} {
		var s shard
		free := max(compactMinFree, live)
		key := func(i int) (pos uint32, th, seq uint64, fp uint32) {
			return uint32(i % 7), uint64(i), uint64(i) * 3, fingerprint(keyHash(uint32(i%7), uint64(i)))
		}
		locals := make([]uint32, live+free)
		for i := range locals {
			pos, th, seq, fp := key(i)
			locals[i], _ = s.addHolder(nil, pos, th, seq, fp, uint32(i%5), 0)
		}
		// Free every other place of the first 2*f, so that free slots lie
		// below the live count and live places above it, and the last ones.
		f := min(free, live)
		kept := []int{}
		for i := range locals {
			if i < 2*f && i%2 == 0 || i >= len(locals)-(free-f) {
				if _, _, ok := s.removeHolder(locals[i], uint32(i%5)); !ok {
					t.Fatalf("live %d: place %d not held", live, i)
				}
			} else {
				kept = append(kept, i)
			}
		}
		if len(kept) != live || !s.needsCompaction() {
			t.Fatalf("live %d: %d kept, compaction due %v", live, len(kept), s.needsCompaction())
		}
		s.compact()
		if int(s.nextNew) != live+1 || len(s.pages) != live>>pageBits+1 {
			t.Fatalf("live %d: next place %d, %d pages", live, s.nextNew, len(s.pages))
		}
		for _, i := range kept {
			pos, th, seq, fp := key(i)
			local := s.lookup(pos, th, seq, fp)
			if local == 0 {
				t.Fatalf("live %d: place %d lost", live, i)
			}
			p := s.place(local)
			if hs := s.holders(p); p.pos != pos || p.th != th || p.seq != seq || len(hs) != 1 || hs[0].wid() != uint32(i%5) {
				t.Fatalf("live %d: place %d is %+v", live, i, *p)
			}
		}
	}
}

// shardOf is the shard of the place of (pos, th).
func shardOf(pos uint32, th uint64) uint32 { return uint32(keyHash(pos, th) >> (64 - shardBits)) }

// thsInShard returns n local hashes from from up whose place at pos lands
// in shard si.
func thsInShard(si uint32, pos uint32, n int, from uint64) []uint64 {
	var out []uint64
	for th := from; len(out) < n; th++ {
		if shardOf(pos, th) == si {
			out = append(out, th)
		}
	}
	return out
}

// A child keeps its link to a parent place that was freed; a compaction of
// the parent's shard then drops the pages that place was in. The link must
// not be followed out of the shard's pages (Places panicked on it).
func TestStaleParentAfterCompaction(t *testing.T) {
	for _, freeze := range []bool{true, false} {
		ix := New()
		a, b := WorkerKey{WorkerID: 1}, WorkerKey{WorkerID: 2}
		var roots []Event
		for _, th := range thsInShard(0, 0, 2*compactMinFree, 1<<20) {
			ev := chain(b, nil, th)
			roots = append(roots, ev)
			if err := ix.Apply(&ev); err != nil {
				t.Fatal(err)
			}
		}
		x := thsInShard(0, 0, 1, 1<<30)[0]
		c := thsInShard(1, 1, 1, 1<<30)[0]
		st := chain(a, nil, x, c)
		apply(t, ix, st)
		// a removes the parent only: the child keeps a link to a freed place.
		apply(t, ix, Event{Worker: a, Kind: KindRemoved, BlockHashes: []uint64{st.Blocks[0].BlockHash}})
		for _, ev := range roots {
			r := removed(b, ev)
			if err := ix.Apply(&r); err != nil {
				t.Fatal(err)
			}
		}
		if err := ix.Verify(); err != nil {
			t.Fatal(err)
		}
		if s := &ix.shards[0]; int(s.nextNew) > 1+pageSize {
			t.Fatalf("shard 0 not compacted: next place %d", s.nextNew)
		}
		if freeze {
			got := reload(t, ix)
			if err := got.Verify(); err != nil {
				t.Fatal(err)
			}
		}
		apply(t, ix, Event{Worker: a, Kind: KindRemoved, BlockHashes: []uint64{st.Blocks[1].BlockHash}})
		if err := ix.Verify(); err != nil {
			t.Fatal(err)
		}
	}
}
