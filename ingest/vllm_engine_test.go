package ingest

import (
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// offloadBatch is a batch as a vLLM engine with CPU offloading publishes
// it: its OffloadingConnector's events (BlockStored with token_ids [] and
// medium "CPU", BlockRemoved with medium "CPU") come in the same batch as
// the GPU block pool's. Found by review: the CPU store failed the whole
// batch (0 token_ids for 1 block hash), the worker was cleared, and the
// batch's GPU store was lost.
func offloadBatch(gpuHash, cpuHash uint64, tok []uint64) []byte {
	m := newMP().arr(3).f(1.0).arr(3)
	m.arr(8).str("BlockStored").us(gpuHash).null().us(tok...).u(2).null().str("GPU").null()
	m.arr(8).str("BlockStored").us(cpuHash).null().arr(0).u(2).null().str("CPU").null()
	m.mapl(3).str("type").str("BlockRemoved").str("block_hashes").us(cpuHash).str("medium").str("CPU")
	m.null()
	return m.bytes()
}

func TestOtherMediumSkipped(t *testing.T) {
	b, err := new(VLLMDecoder).Decode(offloadBatch(200, 100, tokens(2, 20)), 7)
	if err != nil || len(b.Events) != 1 || b.OtherMedium != 2 || b.Unknown != 0 {
		t.Fatalf("decode: %+v, %v; want the GPU store, 2 events of another medium", b, err)
	}

	st := &indexStore{ix: engine.New()}
	s := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:1", WorkerID: 7}, st, testOptions())
	handleBatch(t, s, liveMsg(0, storedOnRank(0, 100, 10))) // block A on the GPU
	handleBatch(t, s, liveMsg(1, offloadBatch(200, 100, tokens(2, 20))))
	// A CPU eviction alone, in the array form.
	handleBatch(t, s, liveMsg(2, newMP().arr(3).f(1.0).arr(1).arr(3).str("BlockRemoved").us(100).str("CPU").u(0).bytes()))
	if got := st.ix.Match(local(tokens(2, 10), 2, ""), nil); len(got) != 1 {
		t.Errorf("block A, still on the GPU, after its CPU offload and eviction: %v", got)
	}
	if got := st.ix.Match(local(tokens(2, 20), 2, ""), nil); len(got) != 1 {
		t.Errorf("the GPU store in the batch with the CPU offload: %v", got)
	}
	stats := s.Stats()
	if stats.Clears != 0 || len(stats.Errors) != 0 || stats.OtherMedium != 3 {
		t.Errorf("stats: clears %d, errors %v, other medium %d; want 0, none, 3", stats.Clears, stats.Errors, stats.OtherMedium)
	}
}

// An engine from before lora_name (vLLM salted its own block keys by the
// LoRA's int id then) sends only lora_id: its blocks are salted by
// LoraIDName, not indexed as the base model's (found by review: base-model
// queries matched workers holding only LoRA KV).
func TestLoraIDOnly(t *testing.T) {
	tok := tokens(4, 1)
	batch := func(loraID *uint64) []byte {
		m := newMP().arr(3).f(1).arr(1).arr(7).str("BlockStored").us(11).null().us(tok...).u(4)
		if loraID != nil {
			m.u(*loraID)
		} else {
			m.null()
		}
		return m.str("GPU").u(0).bytes()
	}
	three := uint64(3)
	for _, tt := range []struct {
		name   string
		loraID *uint64
		want   []uint64
	}{
		{"no lora_id", nil, local(tok, 4, "")},
		{"lora_id 3", &three, local(tok, 4, "lora_id:3")},
	} {
		b, err := new(VLLMDecoder).Decode(batch(tt.loraID), 7)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Events[0].Blocks[0].TokensHash; got != tt.want[0] {
			t.Errorf("%s: tokens hash %x, want %x", tt.name, got, tt.want[0])
		}
	}
	if LoraIDName(3) != "lora_id:3" {
		t.Errorf("LoraIDName(3) = %q", LoraIDName(3))
	}
}

// An engine that restarts after publishing only its batch 0 sends a batch 0
// again, of another payload: a restart, which clears the worker, not a
// duplicate (found by review: the old engine's block stayed, and the new
// engine's batch 0 was dropped). The same batch 0 again is a duplicate.
func TestRestartAfterOnlyBatchZero(t *testing.T) {
	st := &indexStore{ix: engine.New()}
	s := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:1", WorkerID: 7}, st, testOptions())
	handleBatch(t, s, liveMsg(0, storedOnRank(0, 100, 10))) // the old engine
	handleBatch(t, s, liveMsg(0, storedOnRank(0, 100, 10))) // the same batch again
	if st := s.Stats(); st.Duplicates != 1 || st.Resets != 0 {
		t.Fatalf("the same batch 0 twice: %+v", st)
	}
	handleBatch(t, s, liveMsg(0, storedOnRank(0, 200, 20))) // a new engine
	handleBatch(t, s, liveMsg(1, storedOnRank(0, 300, 30)))
	if got := st.ix.Match(local(tokens(2, 10), 2, ""), nil); len(got) != 0 {
		t.Errorf("the old engine's block still matches: %v", got)
	}
	if got := st.ix.Match(local(tokens(2, 20), 2, ""), nil); len(got) != 1 {
		t.Errorf("the new engine's batch 0 block: %v", got)
	}
	if st := s.Stats(); st.Resets != 1 {
		t.Errorf("resets %d, want 1", st.Resets)
	}
}

// medium and lora_id on an event class kvidx does not know change nothing:
// it is skipped as unknown, whatever their values (found by review: a
// medium "CPU" counted it as another medium's, and a value of another type
// failed the batch, which clears the worker).
func TestUnknownClassWithMedium(t *testing.T) {
	for _, fields := range [][2]func(*mp) *mp{
		{func(m *mp) *mp { return m.str("medium") }, func(m *mp) *mp { return m.str("CPU") }},
		{func(m *mp) *mp { return m.str("medium") }, func(m *mp) *mp { return m.u(3) }},
		{func(m *mp) *mp { return m.str("lora_id") }, func(m *mp) *mp { return m.str("x") }},
	} {
		m := newMP().arr(2).f(1.5).arr(1).mapl(2).str("type").str("BlockFuture")
		fields[1](fields[0](m))
		b, err := new(VLLMDecoder).Decode(m.bytes(), 1)
		if err != nil || b.Unknown != 1 || b.OtherMedium != 0 {
			t.Errorf("unknown class: %+v, %v; want it skipped as unknown", b, err)
		}
	}
	// On a store, a medium of another type reads as absent (the GPU).
	m := newMP().arr(2).f(1.5).arr(1).arr(7).str("BlockStored").us(11).null().us(tokens(4, 1)...).u(4).null().u(3)
	if b, err := new(VLLMDecoder).Decode(m.bytes(), 1); err != nil || len(b.Events) != 1 {
		t.Errorf("store with a numeric medium: %+v, %v", b, err)
	}
}
