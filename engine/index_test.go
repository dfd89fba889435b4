package engine

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

var (
	w0 = WorkerKey{WorkerID: 0}
	w1 = WorkerKey{WorkerID: 1}
)

// chain builds a Stored event whose blocks have local hashes ths and, as
// Dynamo engines emit, block hashes equal to their router seqs after prefix.
func chain(w WorkerKey, prefix []uint64, ths ...uint64) Event {
	all := SeqHashes(nil, append(slices.Clone(prefix), ths...))
	ev := Event{Worker: w, Kind: KindStored}
	if len(prefix) > 0 {
		ev.HasParent, ev.ParentHash = true, all[len(prefix)-1]
	}
	for i, th := range ths {
		ev.Blocks = append(ev.Blocks, Block{BlockHash: all[len(prefix)+i], TokensHash: th})
	}
	return ev
}

func removed(w WorkerKey, ev Event) Event {
	r := Event{Worker: w, Kind: KindRemoved}
	for _, b := range ev.Blocks {
		r.BlockHashes = append(r.BlockHashes, b.BlockHash)
	}
	return r
}

func apply(t *testing.T, ix *Index, evs ...Event) {
	t.Helper()
	for i := range evs {
		if err := ix.Apply(&evs[i]); err != nil {
			t.Fatalf("event %d (%v): %v", i, evs[i].Kind, err)
		}
		if err := ix.Verify(); err != nil {
			t.Fatalf("after event %d (%v): %v", i, evs[i].Kind, err)
		}
	}
}

func scoreOf(ix *Index, w WorkerKey, q ...uint64) int {
	for _, s := range ix.Match(q, nil) {
		if s.Worker == w {
			return s.MatchedBlocks
		}
	}
	return 0
}

// heldPlace is where a worker key holds a block: its place.
type heldPlace struct {
	Position   uint32
	TokensHash uint64
	Seq        uint64
}

// placesOf returns the place of every block hash worker key w holds, read
// from a frozen copy of ix.
func placesOf(ix *Index, w WorkerKey) map[uint64]heldPlace {
	f := ix.Freeze()
	defer f.Release(ix)
	out := map[uint64]heldPlace{}
	f.Places(func(r *PlaceRecord) bool {
		for _, h := range r.Holders {
			if h.Worker == w {
				for _, bh := range h.BlockHashes {
					out[bh] = heldPlace{r.Position, r.TokensHash, r.Seq}
				}
			}
		}
		return true
	})
	return out
}

// The table from the bug report that started the project.
func TestNoEmptyEntrySurvives(t *testing.T) {
	store := chain(w0, nil, 1, 2, 3)
	tests := []struct {
		name    string
		events  []Event
		entries int
		check   func(t *testing.T, ix *Index)
	}{
		{"stored then removed", []Event{store, removed(w0, store)}, 0, nil},
		{"stored then cleared", []Event{store, {Worker: w0, Kind: KindCleared}}, 0, nil},
		{"stored then worker removed", []Event{store, {Worker: w0, Kind: KindWorkerRemoved}}, 0, nil},
		{"shared prefix, one worker leaves", []Event{store, chain(w1, nil, 1, 2), removed(w0, store)}, 2,
			func(t *testing.T, ix *Index) {
				if got := scoreOf(ix, w1, 1, 2, 3); got != 2 {
					t.Errorf("worker 1 scores %d, want 2", got)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := New()
			apply(t, ix, tt.events...)
			if got := ix.Len(); got != tt.entries {
				t.Errorf("Len() = %d, want %d", got, tt.entries)
			}
			if tt.check != nil {
				tt.check(t, ix)
			}
		})
	}
}

func TestStoredPositionAndSeq(t *testing.T) {
	ix := New()
	apply(t, ix, chain(w0, nil, 1, 2))
	// Parent given: position parent+1, seq chained from the parent.
	apply(t, ix, chain(w0, []uint64{1, 2}, 3))
	if got := scoreOf(ix, w0, 1, 2, 3); got != 3 {
		t.Fatalf("chained store: score %d, want 3", got)
	}
	// start_position wins over the parent's position, and still chains from the parent's seq.
	ev := chain(w0, []uint64{1, 2, 3}, 4)
	ev.HasStartPosition, ev.StartPosition = true, 7
	apply(t, ix, ev)
	if got := scoreOf(ix, w0, 1, 2, 3, 4); got != 3 {
		t.Fatalf("start_position 7 must not land at position 3: score %d, want 3", got)
	}
	// It lands at position 7 exactly, its seq chained from the parent's.
	want := heldPlace{Position: 7, TokensHash: 4, Seq: NextSeq(SeqHashes(nil, []uint64{1, 2, 3})[2], 4)}
	if got, ok := placesOf(ix, w0)[ev.Blocks[0].BlockHash]; !ok || got != want {
		t.Fatalf("start_position 7 with a parent: block at %+v (held %v), want %+v", got, ok, want)
	}
	// start_position without a parent: the block hash is the router seq (a Dynamo dump).
	seqs := SeqHashes(nil, []uint64{5, 6, 7})
	apply(t, ix, Event{Worker: w1, Kind: KindStored, Blocks: []Block{{BlockHash: seqs[0], TokensHash: 5}}})
	apply(t, ix, Event{Worker: w1, Kind: KindStored, HasStartPosition: true, StartPosition: 1,
		Blocks: []Block{{BlockHash: seqs[1], TokensHash: 6}, {BlockHash: 999, TokensHash: 7}}})
	if got := scoreOf(ix, w1, 5, 6, 7); got != 3 {
		t.Fatalf("dump replay: score %d, want 3", got)
	}
	// No parent, no start position: position 0, seq = local hash.
	apply(t, ix, Event{Worker: w1, Kind: KindStored, Blocks: []Block{{BlockHash: 42, TokensHash: 9}}})
	if got := scoreOf(ix, w1, 9); got != 1 {
		t.Fatalf("root store: score %d, want 1", got)
	}
}

func TestStoredRejections(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		want error
	}{
		{"unknown parent", chain(w0, []uint64{77}, 1), ErrParentNotFound},
		{"parent held by another worker key", chain(WorkerKey{WorkerID: 0, DPRank: 1}, []uint64{1}, 2), ErrParentNotFound},
		{"parent among own blocks", Event{Worker: w0, Kind: KindStored, HasParent: true, ParentHash: 5, Blocks: []Block{{BlockHash: 4, TokensHash: 1}, {BlockHash: 5, TokensHash: 2}}}, ErrInvalidSequence},
		{"no blocks", Event{Worker: w0, Kind: KindStored}, ErrInvalidSequence},
		{"position overflow", Event{Worker: w0, Kind: KindStored, HasStartPosition: true, StartPosition: MaxPosition, Blocks: []Block{{1, 1}, {2, 2}}}, ErrInvalidSequence},
		{"unknown kind", Event{Worker: w0, Kind: 99}, ErrInvalidEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := New()
			apply(t, ix, chain(w0, nil, 1))
			before := ix.Stats()
			err := ix.Apply(&tt.ev)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply: %v, want %v", err, tt.want)
			}
			after := ix.Stats()
			if after.Entries != before.Entries || after.HolderBlocks != before.HolderBlocks || after.WorkerKeys != before.WorkerKeys {
				t.Fatalf("a rejected event changed the index: %+v -> %+v", before, after)
			}
			if RejectReason(err) != tt.want.Error() {
				t.Fatalf("RejectReason = %q", RejectReason(err))
			}
		})
	}
	ix := New()
	_ = ix.Apply(&Event{Worker: w0, Kind: KindStored, HasParent: true, ParentHash: 3, Blocks: []Block{{1, 1}}})
	if c := ix.Counters(); c.ParentNotFound != 1 || c.EventsStored != 0 {
		t.Fatalf("counters %+v", c)
	}
}

// The README's boundary: positions are kept up to 2^32-2 (MaxPosition), so
// a block at 2^32-1, which fits 32 bits, is refused like one past it,
// whether a start_position or a parent puts it there.
func TestPositionBoundary(t *testing.T) {
	atMax := Event{Worker: w0, Kind: KindStored, HasStartPosition: true, StartPosition: 1<<32 - 2, Blocks: []Block{{BlockHash: 9, TokensHash: 9}}}
	tests := []struct {
		name string
		ev   Event
		want error
	}{
		{"one block at 2^32-2", Event{Worker: w1, Kind: KindStored, HasStartPosition: true, StartPosition: 1<<32 - 2, Blocks: []Block{{1, 1}}}, nil},
		{"two blocks ending at 2^32-2", Event{Worker: w1, Kind: KindStored, HasStartPosition: true, StartPosition: 1<<32 - 3, Blocks: []Block{{1, 1}, {2, 2}}}, nil},
		{"one block at 2^32-1", Event{Worker: w1, Kind: KindStored, HasStartPosition: true, StartPosition: 1<<32 - 1, Blocks: []Block{{1, 1}}}, ErrInvalidSequence},
		{"two blocks ending at 2^32-1", Event{Worker: w1, Kind: KindStored, HasStartPosition: true, StartPosition: 1<<32 - 2, Blocks: []Block{{1, 1}, {2, 2}}}, ErrInvalidSequence},
		{"child of a block at 2^32-2", Event{Worker: w0, Kind: KindStored, HasParent: true, ParentHash: 9, Blocks: []Block{{1, 1}}}, ErrInvalidSequence},
	}
	if MaxPosition != 1<<32-2 {
		t.Fatalf("MaxPosition = %d; the README says positions are kept up to 2^32-2", uint64(MaxPosition))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := New()
			apply(t, ix, atMax)
			before := ix.Stats()
			err := ix.Apply(&tt.ev)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply: %v, want %v", err, tt.want)
			}
			grow := len(tt.ev.Blocks)
			if tt.want != nil {
				grow = 0
			}
			if after := ix.Stats(); after.HolderBlocks != before.HolderBlocks+grow {
				t.Fatalf("holder-blocks %d -> %d, want %d more", before.HolderBlocks, after.HolderBlocks, grow)
			}
		})
	}
}

func TestDuplicateStoreAndMove(t *testing.T) {
	ix := New()
	first := chain(w0, nil, 1, 2, 3)
	apply(t, ix, first, first)
	c := ix.Counters()
	if c.DuplicateStore != 3 || c.BlocksStored != 3 {
		t.Fatalf("replayed store: counters %+v", c)
	}
	if ix.Len() != 3 || ix.WorkerBlockCount(w0) != 3 {
		t.Fatalf("replayed store changed state: Len %d, blocks %d", ix.Len(), ix.WorkerBlockCount(w0))
	}
	// Re-store block hash of block 3 under another chain: it moves, and the
	// move does not cascade to other blocks.
	move := Event{Worker: w0, Kind: KindStored, Blocks: []Block{{BlockHash: 100, TokensHash: 7}, {BlockHash: first.Blocks[2].BlockHash, TokensHash: 8}}}
	apply(t, ix, move)
	if got := scoreOf(ix, w0, 1, 2, 3); got != 2 {
		t.Fatalf("moved block still scores at its old place: %d", got)
	}
	if got := scoreOf(ix, w0, 7, 8); got != 2 {
		t.Fatalf("moved block not at its new place: %d", got)
	}
	if ix.WorkerBlockCount(w0) != 4 || ix.Len() != 4 {
		t.Fatalf("after move: blocks %d (want 4), Len %d (want 4)", ix.WorkerBlockCount(w0), ix.Len())
	}
	// A block hash repeated inside one event ends at its last place.
	rep := Event{Worker: w1, Kind: KindStored, Blocks: []Block{{BlockHash: 5, TokensHash: 1}, {BlockHash: 5, TokensHash: 2}}}
	apply(t, ix, rep)
	if ix.WorkerBlockCount(w1) != 1 {
		t.Fatalf("repeated hash: %d blocks, want 1", ix.WorkerBlockCount(w1))
	}
	if got := scoreOf(ix, w1, 1); got != 0 {
		t.Fatalf("repeated hash left its first place held: score %d", got)
	}
}

func TestRemovedSkipsUnknown(t *testing.T) {
	ix := New()
	store := chain(w0, nil, 1, 2, 3)
	apply(t, ix, store)
	apply(t, ix, Event{Worker: w0, Kind: KindRemoved, BlockHashes: []uint64{12345, store.Blocks[2].BlockHash, 999}})
	if c := ix.Counters(); c.BlockNotFound != 2 || c.BlocksRemoved != 1 {
		t.Fatalf("counters %+v", c)
	}
	if got := scoreOf(ix, w0, 1, 2, 3); got != 2 {
		t.Fatalf("score %d, want 2", got)
	}
	// Removing from an unknown worker key counts every hash.
	apply(t, ix, Event{Worker: w1, Kind: KindRemoved, BlockHashes: []uint64{1, 2}})
	if c := ix.Counters(); c.BlockNotFound != 4 {
		t.Fatalf("counters %+v", c)
	}
}

func TestMidChainRemovalStopsScore(t *testing.T) {
	ix := New()
	store := chain(w0, nil, 1, 2, 3, 4, 5, 6, 7, 8)
	apply(t, ix, store, chain(w1, nil, 1, 2, 3, 4, 5, 6, 7, 8))
	apply(t, ix, Event{Worker: w0, Kind: KindRemoved, BlockHashes: []uint64{store.Blocks[3].BlockHash}})
	q := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	want := []Score{{w1, 8}, {w0, 3}}
	if got := ix.Match(q, nil); !slices.Equal(got, want) {
		t.Fatalf("scores %v, want %v", got, want)
	}
	// Parent and child in one Removed event, parent first: no hole remains.
	apply(t, ix, Event{Worker: w1, Kind: KindRemoved, BlockHashes: []uint64{store.Blocks[6].BlockHash, store.Blocks[7].BlockHash}})
	if got := scoreOf(ix, w1, q...); got != 6 {
		t.Fatalf("score %d, want 6", got)
	}
}

func TestClearedAndWorkerRemoved(t *testing.T) {
	ix := New()
	r1 := WorkerKey{WorkerID: 1, DPRank: 1}
	apply(t, ix, chain(w0, nil, 1, 2), chain(w1, nil, 1, 2), chain(r1, nil, 1, 2, 3))
	apply(t, ix, Event{Worker: w1, Kind: KindCleared})
	if got := ix.Match([]uint64{1, 2, 3}, nil); !slices.Equal(got, []Score{{r1, 3}, {w0, 2}}) {
		t.Fatalf("after clear of 1/0: %v", got)
	}
	apply(t, ix, chain(w1, nil, 1))
	apply(t, ix, Event{Worker: WorkerKey{WorkerID: 1, DPRank: 7}, Kind: KindWorkerRemoved})
	if got := ix.Match([]uint64{1, 2, 3}, nil); !slices.Equal(got, []Score{{w0, 2}}) {
		t.Fatalf("after worker 1 removed: %v", got)
	}
	if s := ix.Stats(); s.WorkerKeys != 1 || s.HolderBlocks != 2 || s.Entries != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOnePlaceTwoBlockHashes(t *testing.T) {
	ix := New()
	a := Event{Worker: w0, Kind: KindStored, Blocks: []Block{{BlockHash: 10, TokensHash: 1}}}
	b := Event{Worker: w0, Kind: KindStored, Blocks: []Block{{BlockHash: 20, TokensHash: 1}}}
	apply(t, ix, a, b)
	if ix.WorkerBlockCount(w0) != 2 || ix.Len() != 1 {
		t.Fatalf("blocks %d (want 2), Len %d (want 1)", ix.WorkerBlockCount(w0), ix.Len())
	}
	apply(t, ix, Event{Worker: w0, Kind: KindRemoved, BlockHashes: []uint64{10}})
	if got := scoreOf(ix, w0, 1); got != 1 {
		t.Fatalf("still held under block 20: score %d, want 1", got)
	}
	apply(t, ix, Event{Worker: w0, Kind: KindRemoved, BlockHashes: []uint64{20}})
	if ix.Len() != 0 || ix.WorkerBlockCount(w0) != 0 {
		t.Fatalf("Len %d, blocks %d", ix.Len(), ix.WorkerBlockCount(w0))
	}
}

func TestMatchCandidatesAndOrder(t *testing.T) {
	ix := New()
	for id := uint64(0); id < 40; id++ {
		n := int(id%5) + 1
		apply(t, ix, chain(WorkerKey{WorkerID: 100 - id, DPRank: uint32(id % 2)}, nil, []uint64{1, 2, 3, 4, 5}[:n]...))
	}
	got := ix.Match([]uint64{1, 2, 3, 4, 5}, nil)
	if len(got) != 40 {
		t.Fatalf("%d scores, want 40", len(got))
	}
	want := slices.Clone(got)
	SortScores(want)
	if !slices.Equal(got, want) {
		t.Fatalf("not sorted: %v", got)
	}
	c := []WorkerKey{{WorkerID: 100}, {WorkerID: 99, DPRank: 1}, {WorkerID: 5}}
	if got := ix.Match([]uint64{1, 2, 3, 4, 5}, c); !slices.Equal(got, []Score{{WorkerKey{WorkerID: 99, DPRank: 1}, 2}, {WorkerKey{WorkerID: 100}, 1}}) {
		t.Fatalf("candidates: %v", got)
	}
	if got := ix.Match([]uint64{1}, []WorkerKey{}); got == nil || len(got) != 0 {
		t.Fatalf("empty candidates: %v", got)
	}
	if got := ix.Match(nil, nil); got == nil || len(got) != 0 {
		t.Fatalf("empty query: %v", got)
	}
}

func TestHashVectors(t *testing.T) {
	if got := LocalHashes(nil, []uint32{1, 2, 3, 4}, 4, ""); !slices.Equal(got, []uint64{14643705804678351452}) {
		t.Fatalf("tokens [1..4]: %v", got)
	}
	local := LocalHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4, "")
	if !slices.Equal(local, []uint64{14643705804678351452, 16777012769546811212}) {
		t.Fatalf("tokens [1..9] (partial block dropped): %v", local)
	}
	if got := SeqHashes(nil, local); !slices.Equal(got, []uint64{14643705804678351452, 4945711292740353085}) {
		t.Fatalf("seqs: %v", got)
	}
	if LoRASeed("") != Seed {
		t.Fatal("empty LoRA name must keep the seed")
	}
	salted := LocalHashes(nil, []uint32{1, 2, 3, 4}, 4, "adapter")
	if salted[0] == local[0] {
		t.Fatal("a LoRA name must salt local hashes")
	}
	// The salt is the formula: seed = 1337 + xxh3_64_with_seed(name, 0),
	// over the same 4-byte little-endian tokens.
	for _, name := range []string{"adapter", "a", "sql-lora-v2"} {
		want := xxh3.HashSeed([]byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}, 1337+xxh3.HashStringSeed(name, 0))
		if got := LocalHashes(nil, []uint32{1, 2, 3, 4}, 4, name); !slices.Equal(got, []uint64{want}) {
			t.Fatalf("LoRA %q: local hashes %v, want [%d]", name, got, want)
		}
	}
	if LocalHashes(nil, []uint32{1, 2, 3}, 4, "") != nil {
		t.Fatal("a partial block must give no hash")
	}
	// A block size no buffer could hold (kvidx inspect match passes the
	// flag as given) is a query of no block, not a panic.
	for _, bs := range []int{0, -1, 1 << 40, math.MaxInt} {
		if got := LocalHashes(nil, []uint32{1, 2, 3, 4}, bs, ""); got != nil {
			t.Fatalf("block size %d: %v, want no hash", bs, got)
		}
	}
}

func TestUnmix(t *testing.T) {
	for _, x := range []uint64{0, 1, 2, 1 << 63, ^uint64(0), 0x1234567890abcdef} {
		if unmix64(mix64(x)) != x {
			t.Fatalf("unmix64(mix64(%#x)) = %#x", x, unmix64(mix64(x)))
		}
	}
}

// A query's epoch stamps never wrap inside the query: with the pooled
// scratch's epoch just short of the wrap, answers stay exact (they were
// wrong when the stamps restarted in the middle of a bisection).
func TestMatchAcrossEpochWrap(t *testing.T) {
	ix, ref := New(), newModel()
	for _, ev := range []Event{
		chain(WorkerKey{WorkerID: 1}, nil, 1, 2, 3, 4, 5),
		chain(WorkerKey{WorkerID: 2}, nil, 1, 2, 3, 4),
		chain(WorkerKey{WorkerID: 3}, nil, 1),
	} {
		apply(t, ix, ev)
		_ = ref.Apply(&ev)
	}
	q := []uint64{1, 2, 3, 4, 5}
	want := ref.Match(q, nil)
	for start := ^uint32(0) - 40; start != 2; start++ {
		m := &matchScratch{score: make([]int32, 3), mark: make([]uint32, 3), tmp: make([]uint32, 3), cand: make([]uint32, 3), gen: make([]uint32, 3), epoch: start}
		ix.scratch.Put(m)
		if got := ix.Match(q, nil); !slices.Equal(got, want) {
			t.Fatalf("epoch %#x before the query: %v, want %v", start, got, want)
		}
	}
}
