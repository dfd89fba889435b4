package engine

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Places held by more than bigHolders worker keys find their holders
// through the shard's position index: stores, moves, removals, clears and
// kids counts on such places agree with the model, and the index stays in
// step with the lists (Verify checks it) as they grow past bigHolders and
// shrink below half of it.
func TestManyHoldersMatchModel(t *testing.T) {
	const workers = 3 * bigHolders
	queries := allQueries()
	indexed := 0 // checks that found a list indexed
	rapid.Check(t, func(t *rapid.T) {
		ix, ref := New(), newModel()
		steps := rapid.IntRange(1, 12*workers).Draw(t, "steps")
		for step := range steps {
			ev := Event{Worker: WorkerKey{WorkerID: rapid.Uint64Range(0, workers-1).Draw(t, "worker")}}
			switch k := rapid.IntRange(0, 19).Draw(t, "kind"); {
			case k < 12:
				// Short chains over a tiny universe: most workers hold the
				// same few places.
				ev.Kind = KindStored
				if rapid.IntRange(0, 2).Draw(t, "has_parent") == 0 {
					ev.HasParent, ev.ParentHash = true, genBlockHash.Draw(t, "parent")
				}
				for range rapid.IntRange(1, 3).Draw(t, "blocks") {
					ev.Blocks = append(ev.Blocks, Block{BlockHash: genBlockHash.Draw(t, "bh"), TokensHash: genTokensHash.Draw(t, "th")})
				}
			case k < 18:
				ev.Kind = KindRemoved
				ev.BlockHashes = rapid.SliceOfN(genBlockHash, 1, 4).Draw(t, "removed")
			default:
				ev.Kind = KindCleared
			}
			errIx, errRef := ix.Apply(&ev), ref.Apply(&ev)
			if RejectReason(errIx) != RejectReason(errRef) {
				t.Fatalf("step %d %+v: index error %v, model error %v", step, ev, errIx, errRef)
			}
			if step%16 != 0 && step != steps-1 {
				continue
			}
			if err := ix.Verify(); err != nil {
				t.Fatalf("step %d %+v: invariants: %v", step, ev, err)
			}
			if got, want := ix.Stats(), ref.Stats(); got != want {
				t.Fatalf("step %d: stats %+v, model %+v", step, got, want)
			}
			for si := range ix.shards {
				if len(ix.shards[si].at) > 0 {
					indexed++
					break
				}
			}
			for _, q := range queries[:40] {
				if got, want := ix.Match(q, nil), ref.Match(q, nil); !slices.Equal(got, want) {
					t.Fatalf("step %d: query %v: scores %v, model %v", step, q, got, want)
				}
			}
		}
	})
	if indexed == 0 {
		t.Fatalf("no check found a list of %d holders or more: the test does not reach the position index", bigHolders)
	}
	t.Logf("%d checks found an indexed list", indexed)
}

// Storing one block for many worker keys finds each key's holder through
// the position index, not by scanning the others: 40,000 keys storing the
// same chain and then dropping its last block (a scan per store and per
// kids update made this quadratic: 3.2 s, against 0.2 s indexed).
func TestManyHoldersIndexed(t *testing.T) {
	const keys = 40_000
	ix := New()
	chain := []uint64{11, 12, 13}
	seqs := SeqHashes(nil, chain)
	for w := range uint64(keys) {
		ev := Event{Worker: WorkerKey{WorkerID: w}, Kind: KindStored}
		for i, th := range chain {
			ev.Blocks = append(ev.Blocks, Block{BlockHash: seqs[i], TokensHash: th})
		}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := ix.Match(chain, nil); len(got) != keys || got[0].MatchedBlocks != 3 {
		t.Fatalf("%d scores (first %v), want %d of 3 blocks", len(got), got[:1], keys)
	}
	lists := 0
	for si := range ix.shards {
		for _, x := range ix.shards[si].at {
			if len(x.of) != keys {
				t.Fatalf("shard %d: a list indexed with %d holders, want %d", si, len(x.of), keys)
			}
			lists++
		}
	}
	if lists != len(chain) {
		t.Fatalf("%d lists indexed, want one a place of the chain (%d)", lists, len(chain))
	}
	for w := range uint64(keys) {
		ev := Event{Worker: WorkerKey{WorkerID: w}, Kind: KindRemoved, BlockHashes: []uint64{seqs[2]}}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	if got := ix.Match(chain, nil); len(got) != keys || got[0].MatchedBlocks != 2 {
		t.Fatalf("%d scores (first %v), want %d of 2 blocks", len(got), got[:1], keys)
	}
}

// An index whose list fell below a quarter of its peak is made again at the
// list's size: a Go map keeps the memory of its peak, and a popular prefix
// that once had thousands of holders would keep that much for good.
func TestManyHoldersIndexShrinks(t *testing.T) {
	const keys, kept = 4000, 500
	ix := New()
	for w := range uint64(keys) {
		ev := Event{Worker: WorkerKey{WorkerID: w}, Kind: KindStored, Blocks: []Block{{BlockHash: 7, TokensHash: 7}}}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	for w := uint64(kept); w < keys; w++ {
		ev := Event{Worker: WorkerKey{WorkerID: w}, Kind: KindRemoved, BlockHashes: []uint64{7}}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	// One more store looks the list up, making its index again.
	ev := Event{Worker: WorkerKey{WorkerID: keys}, Kind: KindStored, Blocks: []Block{{BlockHash: 7, TokensHash: 7}}}
	if err := ix.Apply(&ev); err != nil {
		t.Fatal(err)
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	found := false
	for si := range ix.shards {
		for _, x := range ix.shards[si].at {
			found = true
			if x.peak > 2*(kept+1) {
				t.Fatalf("index of a %d-holder list keeps a peak of %d", len(x.of), x.peak)
			}
		}
	}
	if !found {
		t.Fatal("no list indexed")
	}
}
