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
