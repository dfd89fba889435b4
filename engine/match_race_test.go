package engine

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMatchWhileWorkerGetsHole: a query that reads a worker as hole-free and
// scores it by bisection while the writer gives it a block without its
// parents must not score it for positions it never held. Worker w only ever
// holds positions 0 and 4 of the query; many workers hold the whole chain,
// so that bisection probes position 4 and nothing between, long after it
// read w's flag. Before the queries checked the flag again, about 20 of
// them in a few seconds scored w 5.
func TestMatchWhileWorkerGetsHole(t *testing.T) {
	ix := New()
	q := []uint64{11, 12, 13, 14, 15}
	seqs := SeqHashes(nil, q)
	for i := range 5000 {
		ev := chain(WorkerKey{WorkerID: uint64(i)}, nil, q...)
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	w := WorkerKey{WorkerID: 1 << 40}
	root := Event{Worker: w, Kind: KindStored, Blocks: []Block{{BlockHash: seqs[0], TokensHash: q[0]}}}
	far := Event{Worker: w, Kind: KindStored, HasStartPosition: true, StartPosition: 4,
		Blocks: []Block{{BlockHash: seqs[4], TokensHash: q[4]}}}
	gone := Event{Worker: w, Kind: KindRemoved, BlockHashes: []uint64{seqs[0], seqs[4]}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for !stop.Load() {
			for _, ev := range []*Event{&root, &far, &gone} {
				if err := ix.Apply(ev); err != nil {
					t.Error(err)
					return
				}
				if ev == &root {
					for end := time.Now().Add(time.Duration(rng.IntN(400)) * time.Microsecond); time.Now().Before(end); {
					}
				}
			}
		}
	})
	defer wg.Wait()
	defer stop.Store(true)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		for _, s := range ix.Match(q, nil) {
			if s.Worker == w && s.MatchedBlocks > 1 {
				t.Fatalf("worker %v scored %d: it never held positions 1..3", w, s.MatchedBlocks)
			}
		}
	}
}

// TestMatchBisectionWithUnnestedProbes: bisection probes positions at
// different moments, so a worker without holes that shrinks between two
// probes can be at a later position's probe and missing from an earlier
// position's later probe: the holder sets are then not nested. Worker x
// holds positions 0 and 1 of the query throughout and must always score 2;
// worker y, also without holes, shrinks to position 0 and grows back
// (removing its tail leaf first and storing it under its parent changes no
// linear word). Many workers hold the whole chain, so that each probe takes
// a while. Before bisection intersected the sets, the probe of position 2
// (y there) and then of position 1 (x there, y gone) gave sets of one size,
// taken for equal, and x kept score 1.
func TestMatchBisectionWithUnnestedProbes(t *testing.T) {
	ix := New()
	q := []uint64{21, 22, 23}
	for i := range 3000 {
		ev := chain(WorkerKey{WorkerID: uint64(i)}, nil, q...)
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	x, y := WorkerKey{WorkerID: 1 << 40}, WorkerKey{WorkerID: 1<<40 + 1}
	for _, ev := range []Event{chain(x, nil, q[:2]...), chain(y, nil, q...)} {
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	shrink := Event{Worker: y, Kind: KindRemoved, BlockHashes: []uint64{SeqHashes(nil, q)[2], SeqHashes(nil, q)[1]}}
	grow := chain(y, q[:1], q[1:]...)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			for _, ev := range []*Event{&shrink, &grow} {
				if err := ix.Apply(ev); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	defer wg.Wait()
	defer stop.Store(true)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		got := 0
		for _, s := range ix.Match(q, nil) {
			if s.Worker == x {
				got = s.MatchedBlocks
			}
		}
		if got != 2 {
			t.Fatalf("worker %v, holding positions 0 and 1 throughout, scored %d", x, got)
		}
	}
}
