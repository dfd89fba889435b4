package ingest

import (
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// emptyBatchOnRank is a vLLM batch without events on DP rank rank.
func emptyBatchOnRank(rank uint64) []byte { return newMP().arr(3).f(0).arr(0).u(rank).bytes() }

// A publisher naming ever new DP ranks must not grow the source's rank set,
// and with it every later clear, without bound: a batch past maxDPRanks
// distinct ranks is an undecodable batch (counted, the worker cleared, the
// position moved past it).
func TestZMQDPRanksBounded(t *testing.T) {
	st := &fakeStore{}
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:1", WorkerID: 7}, st, testOptions())
	const n = maxDPRanks + 100
	for seq := range uint64(n) {
		if err := src.deliver(t.Context(), seq, emptyBatchOnRank(seq+1000), false); err != nil {
			t.Fatal(err)
		}
	}
	if len(src.ranks) > maxDPRanks {
		t.Fatalf("%d ranks kept, want at most %d", len(src.ranks), maxDPRanks)
	}
	s := src.Stats()
	if s.Errors[ReasonDecode] != n-maxDPRanks || s.LastSeq != n-1 {
		t.Fatalf("stats %+v: want %d decode errors and the position at %d", s, n-maxDPRanks, n-1)
	}
	// The batch over the limit cleared the known ranks only.
	b := st.snapshot()
	over := b[maxDPRanks]
	if len(over.events) != maxDPRanks || over.events[0].Kind != engine.KindCleared {
		t.Fatalf("the first batch over the limit appended %d events (first %+v), want %d Cleared", len(over.events), over.events[0], maxDPRanks)
	}
	// A corrupt batch clears at most maxDPRanks ranks.
	if err := src.deliver(t.Context(), n, []byte{0xc1}, false); err != nil {
		t.Fatal(err)
	}
	b = st.snapshot()
	if got := len(b[len(b)-1].events); got > maxDPRanks {
		t.Fatalf("one corrupt batch appended %d Cleared events, want at most %d", got, maxDPRanks)
	}
	// Batches on known ranks are still applied.
	stored := newMP().arr(3).f(0).arr(1).arr(5).str("BlockStored").us(1).null().us(1, 2).u(2).u(1000).bytes()
	if err := src.deliver(t.Context(), n+1, stored, false); err != nil {
		t.Fatal(err)
	}
	b = st.snapshot()
	if last := b[len(b)-1]; last.seq != n+1 || len(last.events) != 1 || last.events[0].Kind != engine.KindStored {
		t.Fatalf("batch on a known rank: %+v", last)
	}
}

// clearing, which a source's clear and a start's clear of what an endpoint
// fed both append, clears the ranks given, in their order, or removes the
// worker id whole; no rank, no event.
func TestClearing(t *testing.T) {
	cleared := func(r uint32) engine.Event {
		return engine.Event{Worker: engine.WorkerKey{WorkerID: 7, DPRank: r}, Kind: engine.KindCleared}
	}
	for _, tc := range []struct {
		name  string
		ranks []uint32
		whole bool
		want  []engine.Event
	}{
		{name: "no rank"},
		{name: "ranks", ranks: []uint32{0, 2, 5}, want: []engine.Event{cleared(0), cleared(2), cleared(5)}},
		{name: "whole", ranks: []uint32{1}, whole: true, want: []engine.Event{{Worker: engine.WorkerKey{WorkerID: 7}, Kind: engine.KindWorkerRemoved}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clearing(7, tc.ranks, tc.whole)
			if len(got) != len(tc.want) {
				t.Fatalf("clearing(7, %v, %v) = %+v, want %+v", tc.ranks, tc.whole, got, tc.want)
			}
			for i := range got {
				if got[i].Worker != tc.want[i].Worker || got[i].Kind != tc.want[i].Kind || len(got[i].Blocks) != 0 {
					t.Errorf("clearing(7, %v, %v)[%d] = %+v, want %+v", tc.ranks, tc.whole, i, got[i], tc.want[i])
				}
			}
		})
	}
}
