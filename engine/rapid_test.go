package engine

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Small universes make the interesting cases common: duplicate stores, moves,
// unknown parents, removals of blocks not held, mid-chain removals, one place
// held under two block hashes.
var (
	genWorker = rapid.Custom(func(t *rapid.T) WorkerKey {
		return WorkerKey{WorkerID: rapid.Uint64Range(0, 2).Draw(t, "worker_id"), DPRank: rapid.Uint32Range(0, 1).Draw(t, "dp_rank")}
	})
	genBlockHash  = rapid.Uint64Range(1, 10)
	genTokensHash = rapid.Uint64Range(1, 3)
)

func genEvent(t *rapid.T) Event {
	ev := Event{Worker: genWorker.Draw(t, "worker")}
	switch k := rapid.IntRange(0, 19).Draw(t, "kind"); {
	case k < 11:
		ev.Kind = KindStored
		if rapid.IntRange(0, 2).Draw(t, "has_parent") > 0 {
			ev.HasParent, ev.ParentHash = true, genBlockHash.Draw(t, "parent")
		}
		if rapid.IntRange(0, 7).Draw(t, "has_start") == 0 {
			ev.HasStartPosition, ev.StartPosition = true, rapid.Uint64Range(0, 4).Draw(t, "start")
		}
		n := rapid.IntRange(0, 5).Draw(t, "blocks")
		for range n {
			ev.Blocks = append(ev.Blocks, Block{BlockHash: genBlockHash.Draw(t, "bh"), TokensHash: genTokensHash.Draw(t, "th")})
		}
	case k < 17:
		ev.Kind = KindRemoved
		ev.BlockHashes = rapid.SliceOfN(genBlockHash, 0, 5).Draw(t, "removed")
	case k < 19:
		ev.Kind = KindCleared
	default:
		ev.Kind = KindWorkerRemoved
	}
	return ev
}

// allQueries enumerates every local-hash sequence up to length 5 over the
// tokens-hash universe: 363 queries, so every reachable chain is checked.
func allQueries() [][]uint64 {
	var out [][]uint64
	var walk func(prefix []uint64)
	walk = func(prefix []uint64) {
		out = append(out, slices.Clone(prefix))
		if len(prefix) == 5 {
			return
		}
		for th := uint64(1); th <= 3; th++ {
			walk(append(prefix, th))
		}
	}
	walk(nil)
	return out
}

func TestIndexMatchesModel(t *testing.T) {
	queries := allQueries()
	cands := [][]WorkerKey{nil, {}, {{WorkerID: 1}}, {{WorkerID: 0, DPRank: 1}, {WorkerID: 2}, {WorkerID: 9}}}
	rapid.Check(t, func(t *rapid.T) {
		ix, ref := New(), newModel()
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for step := range steps {
			ev := genEvent(t)
			errIx, errRef := ix.Apply(&ev), ref.Apply(&ev)
			if RejectReason(errIx) != RejectReason(errRef) {
				t.Fatalf("step %d %+v: index error %v, model error %v", step, ev, errIx, errRef)
			}
			if err := ix.Verify(); err != nil {
				t.Fatalf("step %d %+v: invariants: %v", step, ev, err)
			}
			if got, want := ix.Stats(), ref.Stats(); got != want {
				t.Fatalf("step %d %+v: stats %+v, model %+v", step, ev, got, want)
			}
			if got, want := ix.Workers(), ref.Workers(); !slices.Equal(got, want) {
				t.Fatalf("step %d: workers %v, model %v", step, got, want)
			}
			for _, q := range queries {
				for _, c := range cands {
					if got, want := ix.Match(q, c), ref.Match(q, c); !slices.Equal(got, want) {
						t.Fatalf("step %d %+v: query %v candidates %v: scores %v, model %v", step, ev, q, c, got, want)
					}
				}
			}
		}
	})
}

// Dynamo-style seqs: block hashes equal to router seqs, so start_position
// events without a parent hit real chains.
func TestIndexMatchesModelWithRealSeqs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ix, ref := New(), newModel()
		chain := func(ths []uint64) []uint64 { return SeqHashes(nil, ths) }
		var queries [][]uint64
		for range 40 {
			ev := Event{Worker: genWorker.Draw(t, "worker")}
			ths := rapid.SliceOfN(genTokensHash, 1, 6).Draw(t, "ths")
			seqs := chain(ths)
			queries = append(queries, ths)
			switch rapid.IntRange(0, 5).Draw(t, "kind") {
			case 0, 1, 2:
				ev.Kind = KindStored
				from := rapid.IntRange(0, len(ths)-1).Draw(t, "from")
				switch rapid.IntRange(0, 2).Draw(t, "mode") {
				case 0: // parent given
					if from == 0 {
						break
					}
					ev.HasParent, ev.ParentHash = true, seqs[from-1]
				case 1: // start position, no parent
					ev.HasStartPosition, ev.StartPosition = true, uint64(from)
				default:
					from = 0
				}
				for i := from; i < len(ths); i++ {
					ev.Blocks = append(ev.Blocks, Block{BlockHash: seqs[i], TokensHash: ths[i]})
				}
			case 3, 4:
				ev.Kind = KindRemoved
				for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(ths)-1), 0, 3).Draw(t, "idx") {
					ev.BlockHashes = append(ev.BlockHashes, seqs[i])
				}
			default:
				ev.Kind = KindCleared
			}
			errIx, errRef := ix.Apply(&ev), ref.Apply(&ev)
			if RejectReason(errIx) != RejectReason(errRef) {
				t.Fatalf("%+v: index error %v, model error %v", ev, errIx, errRef)
			}
			if err := ix.Verify(); err != nil {
				t.Fatalf("%+v: invariants: %v", ev, err)
			}
			if got, want := ix.Len(), ref.Len(); got != want {
				t.Fatalf("%+v: Len %d, model %d", ev, got, want)
			}
			for _, q := range queries {
				if got, want := ix.Match(q, nil), ref.Match(q, nil); !slices.Equal(got, want) {
					t.Fatalf("%+v: query %v: scores %v, model %v", ev, q, got, want)
				}
			}
		}
	})
}

func (s Score) String() string { return fmt.Sprintf("%v:%d", s.Worker, s.MatchedBlocks) }
