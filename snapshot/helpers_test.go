package snapshot

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// Small universes make churn, shared prefixes, duplicate block hashes and
// mid-chain removals common.
const (
	nWorkerIDs  = 5
	nDPRanks    = 2
	nBlockHash  = 120
	nTokensHash = 4
)

func randWorker(rng *rand.Rand) engine.WorkerKey {
	return engine.WorkerKey{WorkerID: rng.Uint64N(nWorkerIDs), DPRank: rng.Uint32N(nDPRanks)}
}

// randEvents returns n random events with Removed/Cleared/WorkerRemoved churn.
func randEvents(rng *rand.Rand, n int) []engine.Event {
	evs := make([]engine.Event, 0, n)
	for range n {
		ev := engine.Event{Worker: randWorker(rng), EventID: uint64(len(evs))}
		switch k := rng.IntN(40); {
		case k < 24:
			ev.Kind = engine.KindStored
			if rng.IntN(3) > 0 {
				ev.HasParent, ev.ParentHash = true, 1+rng.Uint64N(nBlockHash)
			}
			if rng.IntN(8) == 0 {
				ev.HasStartPosition, ev.StartPosition = true, rng.Uint64N(6)
			}
			for range 1 + rng.IntN(6) {
				ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: 1 + rng.Uint64N(nBlockHash), TokensHash: 1 + rng.Uint64N(nTokensHash)})
			}
		case k < 36:
			ev.Kind = engine.KindRemoved
			for range rng.IntN(8) {
				ev.BlockHashes = append(ev.BlockHashes, 1+rng.Uint64N(nBlockHash))
			}
		case k < 39:
			ev.Kind = engine.KindCleared
		default:
			ev.Kind = engine.KindWorkerRemoved
		}
		evs = append(evs, ev)
	}
	return evs
}

// queries enumerates every local-hash sequence up to length 4 over the
// tokens-hash universe, plus some longer random ones.
func queries(rng *rand.Rand) [][]uint64 {
	var out [][]uint64
	var walk func(prefix []uint64)
	walk = func(prefix []uint64) {
		out = append(out, slices.Clone(prefix))
		if len(prefix) == 4 {
			return
		}
		for th := uint64(1); th <= nTokensHash; th++ {
			walk(append(prefix, th))
		}
	}
	walk(nil)
	for range 50 {
		q := make([]uint64, 5+rng.IntN(8))
		for i := range q {
			q[i] = 1 + rng.Uint64N(nTokensHash)
		}
		out = append(out, q)
	}
	return out
}

func apply(ix *engine.Index, evs []engine.Event) {
	for i := range evs {
		_ = ix.Apply(&evs[i])
	}
}

// sameIndex fails unless got answers like want: stats with counters,
// per-worker counts, every query's scores (with and without candidates).
// tb is what sameIndex needs of a *testing.T or *rapid.T.
type tb interface {
	Helper()
	Fatalf(string, ...any)
}

func sameIndex(t tb, got, want *engine.Index, qs [][]uint64) {
	t.Helper()
	if err := got.Verify(); err != nil {
		t.Fatalf("loaded index: %v", err)
	}
	if g, w := got.Stats(), want.Stats(); g != w {
		t.Fatalf("stats %+v, want %+v", g, w)
	}
	if g, w := got.Len(), want.Len(); g != w {
		t.Fatalf("len %d, want %d", g, w)
	}
	if g, w := got.Workers(), want.Workers(); !slices.Equal(g, w) {
		t.Fatalf("workers %v, want %v", g, w)
	}
	cands := []engine.WorkerKey{{WorkerID: 1}, {WorkerID: 2, DPRank: 1}, {WorkerID: 77}}
	for _, q := range qs {
		if g, w := got.Match(q, nil), want.Match(q, nil); !slices.Equal(g, w) {
			t.Fatalf("query %v: loaded %v, original %v", q, g, w)
		}
		if g, w := got.Match(q, cands), want.Match(q, cands); !slices.Equal(g, w) {
			t.Fatalf("query %v, candidates %v: loaded %v, original %v", q, cands, g, w)
		}
	}
}

func writeSnap(t testing.TB, dir string, ix *engine.Index, n uint64, opts ...Option) string {
	t.Helper()
	p, err := Write(context.Background(), dir, ix.Freeze(), Meta{Index: n, Sources: []Source{{"a", n}, {"b", 2 * n}}}, opts...)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return p
}

func loadSnap(t testing.TB, path string) (*engine.Index, Meta) {
	t.Helper()
	ix, m, err := Load(context.Background(), path)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return ix, m
}

// bigIndex builds an index of many workers storing chains over a small
// tokens-hash universe (shared prefixes), with some removals.
func bigIndex(rng *rand.Rand, workers, chains int) *engine.Index {
	ix := engine.New()
	for w := range workers {
		key := engine.WorkerKey{WorkerID: uint64(w), DPRank: uint32(w % 3)}
		var held []uint64
		bh := uint64(w) << 32
		for range chains {
			ev := engine.Event{Worker: key, Kind: engine.KindStored}
			if len(held) > 0 && rng.IntN(2) == 0 {
				ev.HasParent, ev.ParentHash = true, held[rng.IntN(len(held))]
			}
			for range 1 + rng.IntN(12) {
				bh++
				ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: bh, TokensHash: 1 + rng.Uint64N(3)})
			}
			if ix.Apply(&ev) == nil {
				for _, b := range ev.Blocks {
					held = append(held, b.BlockHash)
				}
			}
		}
		rm := engine.Event{Worker: key, Kind: engine.KindRemoved}
		for range len(held) / 8 {
			rm.BlockHashes = append(rm.BlockHashes, held[rng.IntN(len(held))])
		}
		_ = ix.Apply(&rm)
	}
	return ix
}
