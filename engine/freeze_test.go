package engine

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// reload freezes ix and loads the frozen places into a new index.
func reload(t interface {
	Fatalf(string, ...any)
}, ix *Index) *Index {
	return load(t, ix.Freeze())
}

// load loads a frozen index into a new one, with the loader hint if given.
func load(t interface {
	Fatalf(string, ...any)
}, f *Frozen, hint ...LoaderHint) *Index {
	l := NewLoader(hint...)
	var err error
	lastPos := uint32(0)
	f.Places(func(rec *PlaceRecord) bool {
		if rec.Position < lastPos {
			t.Fatalf("places out of order: %d after %d", rec.Position, lastPos)
		}
		lastPos = rec.Position
		err = l.Add(rec)
		return err == nil
	})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	ix2, err := l.Finish(f.Stats().Counters)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return ix2
}

func TestFreezeLoadRoundtrip(t *testing.T) {
	queries := allQueries()
	rapid.Check(t, func(t *rapid.T) {
		ix := New()
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			ev := genEvent(t)
			_ = ix.Apply(&ev)
		}
		var got *Index
		if rapid.IntRange(0, 3).Draw(t, "prepared") == 0 {
			// A hint large enough for the loader to fault memory in ahead.
			got = load(t, ix.Freeze(), LoaderHint{Places: prepMinPlaces, HolderBlocks: prepMinPlaces, WorkerKeys: 4})
		} else {
			got = reload(t, ix)
		}
		if err := got.Verify(); err != nil {
			t.Fatalf("loaded index: %v", err)
		}
		if got.Stats() != ix.Stats() {
			t.Fatalf("stats %+v, want %+v", got.Stats(), ix.Stats())
		}
		if !slices.Equal(got.Workers(), ix.Workers()) {
			t.Fatalf("workers %v, want %v", got.Workers(), ix.Workers())
		}
		// Loading keeps every parent link that chains: a worker the
		// original scores by bisection (no holes) is scored so when loaded.
		for _, w := range ix.Workers() {
			id, _ := ix.worker(w.Worker)
			gid, _ := got.worker(w.Worker)
			if !ix.isLinear(id) && got.isLinear(gid) {
				t.Fatalf("worker %v has no holes but is scored linearly after a load", w.Worker)
			}
		}
		for _, q := range queries {
			if a, b := got.Match(q, nil), ix.Match(q, nil); !slices.Equal(a, b) {
				t.Fatalf("query %v: loaded %v, original %v", q, a, b)
			}
		}
		// The loaded index keeps applying events like the original.
		for range 10 {
			ev := genEvent(t)
			if RejectReason(got.Apply(&ev)) != RejectReason(ix.Apply(&ev)) {
				t.Fatalf("after load, %+v applies differently", ev)
			}
		}
		if err := got.Verify(); err != nil {
			t.Fatalf("loaded index after more events: %v", err)
		}
		for _, q := range queries {
			if a, b := got.Match(q, nil), ix.Match(q, nil); !slices.Equal(a, b) {
				t.Fatalf("after more events, query %v: loaded %v, original %v", q, a, b)
			}
		}
	})
}

// loadRecords loads recs into a new index and verifies it.
func loadRecords(t *testing.T, recs []PlaceRecord) *Index {
	t.Helper()
	l := NewLoader()
	for i := range recs {
		if err := l.Add(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	ix, err := l.Finish(Counters{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestLoaderDropsUnsoundParent(t *testing.T) {
	recs := []PlaceRecord{
		{ID: 1, Position: 0, TokensHash: 1, Seq: 1, Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{1}}}},
		{ID: 2, Parent: 1, Position: 1, TokensHash: 2, Seq: 12345, Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{2}}}},
	}
	ix := loadRecords(t, recs)
	if !ix.isLinear(0) {
		t.Fatal("a worker holding a place whose parent link does not chain must be scored linearly")
	}
}

// TestLoaderParentWindow: the loader keeps the refs of two positions only.
// A link to the position before chains across a batch of many places there
// and across a gap in the record stream; a link two positions back, or over
// a position no place holds, is dropped, and its holder scored linearly.
func TestLoaderParentWindow(t *testing.T) {
	w2, w3 := WorkerKey{WorkerID: 2}, WorkerKey{WorkerID: 3}
	s1, s5 := uint64(1), uint64(5)
	s2, s6 := NextSeq(s1, 2), NextSeq(s5, 6)
	s3 := NextSeq(s2, 3)
	hold := func(w WorkerKey, bh uint64) []HolderRecord {
		return []HolderRecord{{Worker: w, BlockHashes: []uint64{bh}}}
	}
	recs := []PlaceRecord{
		{ID: 1, Position: 0, TokensHash: 1, Seq: s1, Holders: hold(w0, 1)},
		{ID: 2, Position: 0, TokensHash: 5, Seq: s5, Holders: hold(w1, 5)},
	}
	// Many more places at position 1, between the parents and their kids.
	for i := range 3000 {
		th := uint64(100 + i)
		recs = append(recs, PlaceRecord{ID: uint32(len(recs) + 1), Position: 1, TokensHash: th, Seq: th, Holders: hold(w2, th)})
	}
	id := func() uint32 { return uint32(len(recs) + 1) }
	p2 := id()
	recs = append(recs,
		PlaceRecord{ID: p2, Parent: 1, Position: 1, TokensHash: 2, Seq: s2, Holders: hold(w0, 2)},
		PlaceRecord{ID: p2 + 1, Parent: 2, Position: 1, TokensHash: 6, Seq: s6, Holders: hold(w1, 6)},
	)
	recs = append(recs,
		PlaceRecord{ID: id(), Parent: p2, Position: 2, TokensHash: 3, Seq: s3, Holders: hold(w0, 3)},
		PlaceRecord{ID: id() + 1, Parent: 1, Position: 2, TokensHash: 7, Seq: NextSeq(s1, 7), Holders: hold(w1, 7)},
		PlaceRecord{ID: id() + 2, Parent: p2, Position: 4, TokensHash: 8, Seq: NextSeq(s2, 8), Holders: hold(w3, 8)},
	)
	ix := loadRecords(t, recs)
	for _, tc := range []struct {
		w      WorkerKey
		linear bool
	}{{w0, false}, {w1, true}, {w2, true}, {w3, true}} { // w2: no parent at position 1
		id, _ := ix.worker(tc.w)
		if got := ix.isLinear(id); got != tc.linear {
			t.Errorf("worker %v: scored linearly %v, want %v", tc.w, got, tc.linear)
		}
	}
	if got := ix.Match([]uint64{1, 2, 3}, []WorkerKey{w0}); len(got) != 1 || got[0].MatchedBlocks != 3 {
		t.Errorf("worker 0 scores %v, want 3 blocks", got)
	}
}

func TestLoaderRejectsBadRecords(t *testing.T) {
	good := PlaceRecord{ID: 1, Position: 0, TokensHash: 1, Seq: 1, Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{1}}}}
	tests := []struct {
		name string
		recs []PlaceRecord
	}{
		{"id 0", []PlaceRecord{{Position: 0, TokensHash: 1, Seq: 1, Holders: good.Holders}}},
		{"no holder", []PlaceRecord{{ID: 1, TokensHash: 1, Seq: 1}}},
		{"holder without block hash", []PlaceRecord{{ID: 1, TokensHash: 1, Seq: 1, Holders: []HolderRecord{{Worker: w0}}}}},
		{"duplicate id", []PlaceRecord{good, {ID: 1, Position: 0, TokensHash: 2, Seq: 2, Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{2}}}}}},
		{"duplicate place", []PlaceRecord{good, {ID: 2, Position: 0, TokensHash: 1, Seq: 1, Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{2}}}}}},
		{"block held twice", []PlaceRecord{good, {ID: 2, Position: 0, TokensHash: 2, Seq: 2, Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{1}}}}}},
		{"out of order", []PlaceRecord{{ID: 1, Position: 3, TokensHash: 2, Seq: 2, Holders: good.Holders}, {ID: 2, Position: 0, TokensHash: 1, Seq: 1, Holders: []HolderRecord{{Worker: w1, BlockHashes: []uint64{1}}}}}},
		{"parent not before", []PlaceRecord{{ID: 1, Parent: 5, Position: 1, TokensHash: 2, Seq: NextSeq(1, 2), Holders: good.Holders}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLoader()
			var err error
			for i := range tt.recs {
				if err = l.Add(&tt.recs[i]); err != nil {
					break
				}
			}
			if err == nil {
				_, err = l.Finish(Counters{})
			}
			if err == nil {
				t.Fatal("bad records loaded without error")
			}
		})
	}
}

// Chains with real seqs, partly removed from the tail: the loaded index
// scores like the original and keeps hole-free workers on the bisection path.
func TestFreezeLoadChains(t *testing.T) {
	ix := New()
	rng := rand.New(rand.NewPCG(5, 6))
	var queries [][]uint64
	for i := range 4000 {
		w := WorkerKey{WorkerID: uint64(i % 12), DPRank: uint32(i % 2)}
		ths := make([]uint64, 2+rng.IntN(20))
		for j := range ths {
			ths[j] = 1 + rng.Uint64N(4)
		}
		ev := chain(w, nil, ths...)
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
		queries = append(queries, ths)
		if rng.IntN(3) == 0 {
			r := removed(w, ev)
			r.BlockHashes = r.BlockHashes[len(r.BlockHashes)-1-rng.IntN(len(r.BlockHashes)-1):]
			if err := ix.Apply(&r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	got := reload(t, ix)
	if err := got.Verify(); err != nil {
		t.Fatal(err)
	}
	for id := range ix.linear {
		if !ix.isLinear(uint32(id)) && ix.workers[id] != nil {
			gid, _ := got.worker(ix.workers[id].key)
			if got.isLinear(gid) {
				t.Fatalf("worker %v lost its hole-free status in the reload", ix.workers[id].key)
			}
		}
	}
	for _, q := range queries {
		if a, b := got.Match(q, nil), ix.Match(q, nil); !slices.Equal(a, b) {
			t.Fatalf("query %v: loaded %v, original %v", q, a, b)
		}
	}
}

// A Freeze that reuses released memory copies the current state, not the old.
func TestFreezeReusesReleasedCopy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ix := New()
		for range 3 {
			for range rapid.IntRange(1, 30).Draw(t, "steps") {
				ev := genEvent(t)
				_ = ix.Apply(&ev)
			}
			f := ix.Freeze()
			got := load(t, f)
			for _, q := range allQueries() {
				if a, b := got.Match(q, nil), ix.Match(q, nil); !slices.Equal(a, b) {
					t.Fatalf("query %v: loaded %v, original %v", q, a, b)
				}
			}
			f.Release(ix)
		}
	})
}

// TestTouchedSizes keeps PrepareFreeze's element sizes true.
func TestTouchedSizes(t *testing.T) {
	if n := unsafe.Sizeof(revSlot{}); n != revSlotBytes {
		t.Errorf("revSlot is %d bytes, revSlotBytes says %d", n, revSlotBytes)
	}
	if n := unsafe.Sizeof(place{}); n != placeBytes {
		t.Errorf("place is %d bytes, placeBytes says %d", n, placeBytes)
	}
}

// TestLoaderOddHints: hints are only hints; none of these may panic, and
// an abandoned loader can be closed.
func TestLoaderOddHints(t *testing.T) {
	for _, h := range []LoaderHint{
		{},
		{Places: -1, HolderBlocks: -1, WorkerKeys: -1},
		{Places: prepMinPlaces, HolderBlocks: -100, WorkerKeys: 1},
		{Places: prepMinPlaces, HolderBlocks: math.MaxInt, WorkerKeys: 1},
		{Places: prepMinPlaces, HolderBlocks: prepMinPlaces, WorkerKeys: -1},
		{Places: math.MaxInt, HolderBlocks: math.MaxInt, WorkerKeys: math.MaxInt},
	} {
		l := NewLoader(h)
		l.Close()
		l.Close()
	}
	l := NewLoader(LoaderHint{Places: prepMinPlaces, HolderBlocks: prepMinPlaces, WorkerKeys: 4})
	l.Close() // abandoned while preparing
}

// A place or block listed twice must be caught however far apart the two
// records are.
func TestLoaderFindsDuplicatesAmongMany(t *testing.T) {
	const n = 5000
	many := func(dupPlace, dupBlock bool) []PlaceRecord {
		var recs []PlaceRecord
		for i := range n {
			recs = append(recs, PlaceRecord{ID: uint32(i + 1), Position: 0, TokensHash: uint64(i + 1), Seq: uint64(i + 1),
				Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{uint64(i + 1)}}}})
		}
		last := PlaceRecord{ID: n + 1, Position: 0, TokensHash: n + 1, Seq: n + 1, Holders: []HolderRecord{{Worker: w0, BlockHashes: []uint64{n + 1}}}}
		if dupPlace {
			last.TokensHash, last.Seq = 17, 17
		}
		if dupBlock {
			last.Holders[0].BlockHashes[0] = 17
		}
		return append(recs, last)
	}
	for _, tt := range []struct {
		name               string
		dupPlace, dupBlock bool
		wantErr            bool
	}{
		{"all distinct", false, false, false},
		{"place twice", true, false, true},
		{"block twice", false, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// With the hint, the worker's map is built in its list's memory.
			l := NewLoader(LoaderHint{Places: n + 1, HolderBlocks: n + 1, WorkerKeys: 1})
			recs := many(tt.dupPlace, tt.dupBlock)
			for i := range recs {
				if err := l.Add(&recs[i]); err != nil {
					t.Fatal(err)
				}
			}
			ix, err := l.Finish(Counters{})
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if err := ix.Verify(); err != nil {
				t.Fatal(err)
			}
			if st := ix.Stats(); st.Entries != n+1 || st.HolderBlocks != n+1 {
				t.Fatalf("stats %+v", st)
			}
			for _, r := range recs {
				if got := ix.Match([]uint64{r.TokensHash}, nil); len(got) != 1 || got[0].MatchedBlocks != 1 {
					t.Fatalf("place %d: scores %v", r.ID, got)
				}
			}
		})
	}
}

// A batch whose holders or block hashes point outside it is an error, not a
// panic.
func TestAddPlacesRejectsBadBatches(t *testing.T) {
	good := func() *PlaceBatch {
		return &PlaceBatch{
			Workers: []WorkerKey{w0},
			Places:  []BatchPlace{{ID: 1, TokensHash: 1, Seq: 1, HoldersEnd: 1}},
			Holders: []BatchHolder{{Worker: 0, HashesEnd: 1}},
			Hashes:  []uint64{1},
		}
	}
	for _, tt := range []struct {
		name  string
		spoil func(*PlaceBatch)
	}{
		{"holders past the batch", func(b *PlaceBatch) { b.Places[0].HoldersEnd = 2 }},
		{"hashes past the batch", func(b *PlaceBatch) { b.Holders[0].HashesEnd = 2 }},
		{"worker past the table", func(b *PlaceBatch) { b.Holders[0].Worker = 1 }},
		{"no holder", func(b *PlaceBatch) { b.Places[0].HoldersEnd = 0 }},
		{"no block hash", func(b *PlaceBatch) { b.Holders[0].HashesEnd = 0 }},
		{"holder of no place", func(b *PlaceBatch) { b.Holders = append(b.Holders, BatchHolder{Worker: 0, HashesEnd: 1}) }},
		{"hash of no holder", func(b *PlaceBatch) { b.Hashes = append(b.Hashes, 2) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := good()
			tt.spoil(b)
			if err := NewLoader().AddPlaces(b); err == nil {
				t.Fatal("bad batch added without error")
			}
		})
	}
	if err := NewLoader().AddPlaces(good()); err != nil {
		t.Fatal(err)
	}
}

// Chains may start at any position up to MaxPosition. Places must still come
// out in position order, load back to the same index, and take working
// memory in proportion to places, not to the highest position.
func TestPlacesAtHighPositions(t *testing.T) {
	for _, high := range []uint64{1 << 20, 1 << 31, MaxPosition - 1} {
		ix := New()
		for i, start := range []uint64{0, 7, high - 3, high} {
			ev := Event{Worker: WorkerKey{WorkerID: uint64(i % 2)}, Kind: KindStored, HasStartPosition: true, StartPosition: start,
				Blocks: []Block{{BlockHash: uint64(10*i + 1), TokensHash: 1}, {BlockHash: uint64(10*i + 2), TokensHash: 2}}}
			if err := ix.Apply(&ev); err != nil {
				t.Fatal(err)
			}
		}
		f := ix.Freeze()
		waitGrower(t, &ix.grow)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var positions []uint32
		f.Places(func(r *PlaceRecord) bool {
			positions = append(positions, r.Position)
			return true
		})
		runtime.ReadMemStats(&after)
		if !slices.IsSorted(positions) || len(positions) != 8 {
			t.Fatalf("high %d: positions %v", high, positions)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Fatalf("high %d: Places allocated %d bytes for 8 places", high, grew)
		}
		got := reload(t, ix)
		if err := got.Verify(); err != nil {
			t.Fatal(err)
		}
		if got.Stats() != ix.Stats() {
			t.Fatalf("high %d: stats %+v, want %+v", high, got.Stats(), ix.Stats())
		}
	}
}

// TestPlacesParts checks that Places yields the same records whatever the
// number of goroutines its pair passes use.
func TestPlacesParts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ix := New()
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			ev := genEvent(t)
			_ = ix.Apply(&ev)
		}
		f := ix.Freeze()
		records := func(parts int) []PlaceRecord {
			f.parts = parts
			var out []PlaceRecord
			f.Places(func(rec *PlaceRecord) bool {
				r := *rec
				r.Holders = nil
				for _, h := range rec.Holders {
					h.BlockHashes = slices.Clone(h.BlockHashes)
					r.Holders = append(r.Holders, h)
				}
				out = append(out, r)
				return true
			})
			return out
		}
		want := records(1)
		parts := rapid.IntRange(2, 9).Draw(t, "parts")
		got := records(parts)
		if len(got) != len(want) {
			t.Fatalf("%d parts: %d records, want %d", parts, len(got), len(want))
		}
		for i := range want {
			a, b := got[i], want[i]
			if a.ID != b.ID || a.Parent != b.Parent || a.Position != b.Position || a.TokensHash != b.TokensHash || a.Seq != b.Seq ||
				!slices.EqualFunc(a.Holders, b.Holders, func(x, y HolderRecord) bool {
					return x.Worker == y.Worker && x.WorkerIndex == y.WorkerIndex && slices.Equal(x.BlockHashes, y.BlockHashes)
				}) {
				t.Fatalf("%d parts: record %d is %+v, want %+v", parts, i, a, b)
			}
		}
		// And a load of the parted records is the index.
		f.parts = parts
		got2 := load(t, f)
		if got2.Stats() != ix.Stats() || !slices.Equal(got2.Workers(), ix.Workers()) {
			t.Fatalf("%d parts: loaded %v, want %v", parts, got2, ix)
		}
	})
}

// TestPlacesPartsManyBuckets is TestPlacesParts over an index of several
// buckets of places and many workers, the case the parts split.
func TestPlacesPartsManyBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	ix := New()
	for c := range 3000 {
		w := WorkerKey{WorkerID: uint64(c % 37), DPRank: uint32(c % 3)}
		ths := make([]uint64, 1+rng.IntN(8))
		for j := range ths {
			ths[j] = uint64(rng.IntN(1 << 12))
		}
		ths[0] = uint64(c % 40) // shared roots: places of many holders
		ev := chain(w, nil, ths...)
		_ = ix.Apply(&ev)
	}
	f := ix.Freeze()
	// Entries are at most places: more than two buckets' worth.
	if n := ix.Stats().Entries; n <= 2<<12 {
		t.Fatalf("%d entries: want several buckets of places", n)
	}
	digest := func(parts int) []uint64 {
		f.parts = parts
		var out []uint64
		f.Places(func(rec *PlaceRecord) bool {
			out = append(out, uint64(rec.ID), uint64(rec.Parent), uint64(rec.Position), rec.TokensHash, rec.Seq)
			for _, h := range rec.Holders {
				out = append(out, h.Worker.WorkerID, uint64(h.Worker.DPRank), uint64(h.WorkerIndex))
				out = append(out, h.BlockHashes...)
			}
			return true
		})
		return out
	}
	want := digest(1)
	for _, parts := range []int{2, 3, 8, 64} {
		if got := digest(parts); !slices.Equal(got, want) {
			t.Fatalf("%d parts: records differ from one part's", parts)
		}
	}
	f.parts = 3
	if got := load(t, f); got.Stats() != ix.Stats() || !slices.Equal(got.Workers(), ix.Workers()) {
		t.Fatalf("3 parts: loaded %v, want %v", got, ix)
	}
}

// A loader given the meta's counts builds each reverse map in the memory of
// its worker's list when the map fills most of it, and in new memory
// otherwise (a worker far under the mean); the index answers alike.
func TestLoaderBuildsMapsInLists(t *testing.T) {
	ix := New()
	// Sixteen workers of one size, as caches of one capacity are, and one
	// of two blocks: the mean stays near the big ones'.
	const big = 1000
	for w := range uint64(16) {
		ev := Event{Worker: WorkerKey{WorkerID: w}, Kind: KindStored}
		for i := range uint64(big) {
			ev.Blocks = append(ev.Blocks, Block{BlockHash: w<<32 | i, TokensHash: i%300 + 1})
		}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	small := Event{Worker: WorkerKey{WorkerID: 99}, Kind: KindStored, Blocks: []Block{{BlockHash: 1, TokensHash: 1}, {BlockHash: 2, TokensHash: 2}}}
	if err := ix.Apply(&small); err != nil {
		t.Fatal(err)
	}
	st := ix.Stats()
	got := load(t, ix.Freeze(), LoaderHint{Places: st.Entries, HolderBlocks: st.HolderBlocks, WorkerKeys: st.WorkerKeys})
	if err := got.Verify(); err != nil {
		t.Fatal(err)
	}
	for id, w := range got.workers {
		inList := cap(w.rev.slots) > len(w.rev.slots)
		if want := w.key.WorkerID != 99; inList != want {
			t.Errorf("worker %v (%d blocks, dense id %d): map in its list's memory %v, want %v", w.key, w.rev.n, id, inList, want)
		}
	}
	q := make([]uint64, 0, 400)
	for i := range uint64(400) {
		q = append(q, i%300+1)
	}
	if a, b := ix.Match(q, nil), got.Match(q, nil); !slices.Equal(a, b) {
		t.Fatalf("loaded index answers %v, the original %v", b, a)
	}
}
