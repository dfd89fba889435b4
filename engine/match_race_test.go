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

// TestMatchLinearScoreOfOneMoment: a worker with holes is scored position by
// position, each position probed at another moment. Worker w holds position
// 0 and a sliding pair {i, i+1} of a 6-block query (a block removed, then
// one stored at its start position), so at no moment a prefix longer than
// 3. Before queries compared the worker's changes word around its scan,
// hundreds of them a second scored it 4 to 6 (found by review).
func TestMatchLinearScoreOfOneMoment(t *testing.T) {
	w := WorkerKey{WorkerID: 1}
	q := []uint64{101, 102, 103, 104, 105, 106}
	seqs := SeqHashes(nil, q)
	ix := New()
	at := func(i int) Event { // block i alone, at its position, named by its seq
		ev := Event{Worker: w, Kind: KindStored, Blocks: []Block{{BlockHash: seqs[i], TokensHash: q[i]}}}
		if i > 0 {
			ev.HasStartPosition, ev.StartPosition = true, uint64(i)
		}
		return ev
	}
	rm := func(i int) Event { return Event{Worker: w, Kind: KindRemoved, BlockHashes: []uint64{seqs[i]}} }
	for _, ev := range []Event{at(0), at(1), at(2)} {
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	// {0,1,2} -> {0,2,3} -> {0,3,4} -> {0,4,5} -> {0,5} -> {0,1} -> {0,1,2}
	cycle := []Event{rm(1), at(3), rm(2), at(4), rm(3), at(5), rm(4), at(1), rm(5), at(2)}
	var stop atomic.Bool
	var over, queries atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			for i := range cycle {
				if err := ix.Apply(&cycle[i]); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	wg.Go(func() {
		for !stop.Load() {
			for _, s := range ix.Match(q, nil) {
				if s.MatchedBlocks > 3 || s.MatchedBlocks < 1 {
					over.Add(1)
				}
			}
			queries.Add(1)
		}
	})
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	if n := over.Load(); n > 0 {
		t.Fatalf("%d of %d queries scored w outside 1..3, prefixes it never held at once", n, queries.Load())
	}
}

// TestScanLocked: the locked scan, scanLinear's last resort, scores as the
// unlocked one on an index at rest (queries reach it only when events keep
// changing a worker).
func TestScanLocked(t *testing.T) {
	ix := New()
	q := []uint64{11, 12, 13, 14, 15}
	seqs := SeqHashes(nil, q)
	for i := range 5 {
		ev := chain(WorkerKey{WorkerID: uint64(i)}, nil, q[:i+1]...)
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	// Worker 9 holds positions 0, 1 and 3: it scores 2.
	for _, ev := range []Event{
		chain(WorkerKey{WorkerID: 9}, nil, q[:2]...),
		{Worker: WorkerKey{WorkerID: 9}, Kind: KindStored, HasStartPosition: true, StartPosition: 3,
			Blocks: []Block{{BlockHash: seqs[3], TokensHash: q[3]}}},
	} {
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	m := &matchScratch{}
	m.reset(len(ix.keys), len(q))
	m.local, m.seqs = q, seqs
	ids := make([]uint32, len(ix.keys))
	for i := range ids {
		ids[i] = uint32(i)
	}
	ix.scanLocked(m, ids)
	for id, key := range ix.keys {
		want := int32(key.WorkerID) + 1
		if key.WorkerID == 9 {
			want = 2
		}
		if m.score[id] != want {
			t.Errorf("worker %v scored %d, want %d", key, m.score[id], want)
		}
	}
}
