package workload

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// chain returns the tokens hashes and router sequence hashes of block ids.
func chain(ids ...uint64) (tokens, seqs []uint64) {
	for _, id := range ids {
		tokens = append(tokens, TokensHash(id))
	}
	return tokens, engine.SeqHashes(nil, tokens)
}

// stored is the Stored event of worker w for the blocks of prefix ids from
// position from on (parent: the block before).
func stored(w uint64, eventID uint64, from int, ids ...uint64) engine.Event {
	th, seq := chain(ids...)
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: w}, EventID: eventID, Kind: engine.KindStored}
	if from > 0 {
		ev.HasParent, ev.ParentHash = true, seq[from-1]
	}
	for i := from; i < len(ids); i++ {
		ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: seq[i], TokensHash: th[i]})
	}
	return ev
}

// removed is the Removed event of worker w for the last block of each chain.
func removed(w uint64, eventID uint64, chains ...[]uint64) engine.Event {
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: w}, EventID: eventID, Kind: engine.KindRemoved}
	for _, c := range chains {
		_, seq := chain(c...)
		ev.BlockHashes = append(ev.BlockHashes, seq[len(seq)-1])
	}
	return ev
}

// TestRouting replays five requests on 2 workers of 4 blocks, checked by hand.
// cost = (blocks - score) + load of the last 2 requests; ties to worker 0.
func TestRouting(t *testing.T) {
	tr := &Trace{Records: []Record{
		{HashIDs: []uint64{1, 2, 3}},    // r0: costs 3, 3 -> w0 (tie)
		{HashIDs: []uint64{1, 2, 4}},    // r1: w0 (3-2)+3=4, w1 3+0=3 -> w1
		{HashIDs: []uint64{1, 2, 3, 5}}, // r2: w0 (4-3)+3=4, w1 (4-2)+3=5 -> w0, matched 3
		{HashIDs: []uint64{6, 7}},       // r3: window r1,r2: w0 2+4=6, w1 2+3=5 -> w1; w1 holds 5 > 4: evict LRU (1,2,4)
		{HashIDs: []uint64{1, 2, 4}},    // r4: window r2,r3: w0 (3-2)+4=5, w1 (3-2)+2=3 -> w1, matched 2; evict (6,7): tail first
	}}
	type step struct {
		worker  uint64
		matched int
		events  []engine.Event
	}
	want := []step{
		{0, 0, []engine.Event{stored(0, 1, 0, 1, 2, 3)}},
		{1, 0, []engine.Event{stored(1, 1, 0, 1, 2, 4)}},
		{0, 3, []engine.Event{stored(0, 2, 3, 1, 2, 3, 5)}},
		{1, 0, []engine.Event{stored(1, 2, 0, 6, 7), removed(1, 3, []uint64{1, 2, 4})}},
		{1, 2, []engine.Event{stored(1, 4, 2, 1, 2, 4), removed(1, 5, []uint64{6, 7})}},
	}
	var got []step
	cfg := Config{Workers: 2, Capacity: 4, Duplicate: 1}
	ix := engine.New()
	err := Run(context.Background(), ix, tr, cfg, func(req Request, events []engine.Event) error {
		if req.Worker.DPRank != 0 {
			t.Errorf("request %d: DP rank %d", req.Seq, req.Worker.DPRank)
		}
		got = append(got, step{req.Worker.WorkerID, req.Matched, CloneEvents(events)})
		return nil
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	// Final state: w0 holds 1,2,3,5; w1 holds 1,2,4 and 6 (4 each).
	if st := ix.Stats(); st.HolderBlocks != 8 {
		t.Errorf("holder blocks = %d, want 8", st.HolderBlocks)
	}
	if err := ix.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestSimulatorHitRate(t *testing.T) {
	tr := &Trace{Records: []Record{
		{HashIDs: []uint64{1, 2, 3}}, {HashIDs: []uint64{1, 2, 4}}, {HashIDs: []uint64{1, 2, 3, 5}},
		{HashIDs: []uint64{6, 7}}, {HashIDs: []uint64{1, 2, 4}},
	}}
	sim, err := NewSimulator(Config{Workers: 2, Capacity: 4, Duplicate: 1})
	if err != nil {
		t.Fatal(err)
	}
	ix := engine.New()
	for req := range Requests(tr, 1) {
		w, _ := sim.Route(req.Blocks(), ix.Match(req.TokensHashes, nil))
		for _, ev := range sim.Serve(w, req) {
			if err := ix.Apply(&ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Matched 0+0+3+0+2 of 3+3+4+2+3 blocks.
	if got, want := sim.HitRate(), 5.0/15; got != want {
		t.Errorf("HitRate = %v, want %v", got, want)
	}
	if got := sim.CachedBlocks(); got != ix.Stats().HolderBlocks {
		t.Errorf("CachedBlocks = %d, index holds %d", got, ix.Stats().HolderBlocks)
	}
}

func TestRunStops(t *testing.T) {
	tr := embeddedTrace(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Generate(ctx, tr, DefaultConfig(), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Generate with a cancelled context: %v, want context.Canceled", err)
	}
	stop := errors.New("stop")
	n := 0
	err := Generate(context.Background(), tr, DefaultConfig(), func(Request, []engine.Event) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Errorf("Generate stopped by its callback: %v after %d requests, want stop after 3", err, n)
	}
	if err := Generate(context.Background(), tr, Config{}, nil); err == nil {
		t.Error("Generate with a zero config: want error")
	}
}
