package recovery

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// Small universes, so that events interact: shared entries across workers,
// removals of held blocks in the middle of chains, duplicate stores,
// parents that are gone.
const (
	genWorkers = 4
	genRanks   = 3
	genTokens  = 4
	genBlocks  = 24
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// genBatch returns the deterministic batch number b of the stream seeded
// with seed: a few events of every kind.
func genBatch(seed, b uint64) []engine.Event {
	r := rand.New(rand.NewPCG(seed, b))
	n := 1 + r.IntN(4)
	evs := make([]engine.Event, 0, n)
	for range n {
		evs = append(evs, genEvent(r))
	}
	return evs
}

func genEvent(r *rand.Rand) engine.Event {
	w := engine.WorkerKey{WorkerID: uint64(1 + r.IntN(genWorkers))}
	if w.WorkerID >= 3 { // workers 3 and 4 run DP ranks
		w.DPRank = uint32(r.IntN(genRanks))
	}
	ev := engine.Event{Worker: w, EventID: r.Uint64()}
	blockHash := func() uint64 { return uint64(1 + r.IntN(genBlocks)) }
	switch k := r.IntN(100); {
	case k < 58:
		ev.Kind = engine.KindStored
		if r.IntN(3) > 0 {
			ev.HasParent, ev.ParentHash = true, blockHash()
		}
		if r.IntN(8) == 0 {
			ev.HasStartPosition, ev.StartPosition = true, uint64(r.IntN(4))
		}
		nb := r.IntN(5) // 0: invalid_sequence
		for range nb {
			ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: blockHash(), TokensHash: uint64(100 + r.IntN(genTokens))})
		}
	case k < 88:
		ev.Kind = engine.KindRemoved
		for range 1 + r.IntN(4) {
			ev.BlockHashes = append(ev.BlockHashes, blockHash())
		}
	case k < 95:
		ev.Kind = engine.KindCleared
	case k < 99:
		ev.Kind = engine.KindWorkerRemoved
	default:
		ev.Kind = engine.EventKind(9) // invalid_event
	}
	return ev
}

// queries are every chain of up to 4 local hashes over the token universe.
var queries = func() [][]uint64 {
	var out [][]uint64
	var rec func(prefix []uint64)
	rec = func(prefix []uint64) {
		if len(prefix) > 0 {
			out = append(out, slices.Clone(prefix))
		}
		if len(prefix) == 4 {
			return
		}
		for t := range genTokens {
			rec(append(prefix, uint64(100+t)))
		}
	}
	rec(nil)
	return out
}()

// dumpIndex is a canonical text of an index's whole state: stats, workers
// and every place with its holders and their block hashes.
func dumpIndex(ix *engine.Index) []string {
	out := []string{fmt.Sprintf("stats %+v", ix.Stats()), fmt.Sprintf("workers %v", ix.Workers())}
	f := ix.Freeze()
	defer f.Release(ix)
	var places []string
	f.Places(func(p *engine.PlaceRecord) bool {
		var b strings.Builder
		fmt.Fprintf(&b, "place pos=%d th=%d seq=%d", p.Position, p.TokensHash, p.Seq)
		for _, h := range p.Holders {
			hs := slices.Clone(h.BlockHashes)
			slices.Sort(hs)
			fmt.Fprintf(&b, " %v%v", h.Worker, hs)
		}
		places = append(places, b.String())
		return true
	})
	sort.Strings(places)
	return append(out, places...)
}

// sameState fails t unless got and want hold the same state: canonical
// dump, Stats (entries, holder-blocks, worker keys, counters), per-worker
// counts and Match scores for every query; and got passes Verify (no empty
// entry).
func sameState(t tb, got, want *engine.Index) {
	t.Helper()
	if err := got.Verify(); err != nil {
		t.Fatalf("recovered index fails Verify: %v", err)
	}
	if g, w := got.Stats(), want.Stats(); g != w {
		t.Fatalf("stats differ:\n got  %+v\n want %+v", g, w)
	}
	if g, w := got.Workers(), want.Workers(); !slices.Equal(g, w) {
		t.Fatalf("workers differ:\n got  %v\n want %v", g, w)
	}
	gd, wd := dumpIndex(got), dumpIndex(want)
	if !slices.Equal(gd, wd) {
		t.Fatalf("state differs:\n got  %s\n want %s", strings.Join(gd, "\n      "), strings.Join(wd, "\n      "))
	}
	for _, q := range queries {
		if g, w := got.Match(q, nil), want.Match(q, nil); !slices.Equal(g, w) {
			t.Fatalf("Match(%v) = %v, want %v", q, g, w)
		}
	}
}

// model applies batches to a fresh engine, as the reference.
func model(batches [][]engine.Event) *engine.Index {
	ix := engine.New()
	for _, b := range batches {
		for i := range b {
			ix.Apply(&b[i])
		}
	}
	return ix
}

// copyDir copies a data directory (a crash image taken while nothing runs).
func copyDir(t tb, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testOptions() Options {
	return Options{Sync: wal.SyncNone, Logger: quietLogger()}
}

func mustOpen(t tb, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustAppend(t tb, s *Store, evs []engine.Event, pos ...wal.Position) uint64 {
	t.Helper()
	idx, _, err := s.Append(context.Background(), evs, pos)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return idx
}

// tb is what the helpers need of *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}
