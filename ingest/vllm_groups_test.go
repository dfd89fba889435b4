package ingest

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvidx/kvidx/engine"
)

// vLLM (current main, kv_events.py) publishes batches as maps and events as
// maps tagged "type", with group_idx / kv_cache_spec_kind per event. For a
// hybrid model's sliding-window group, block_pool.cache_full_blocks skips the
// null blocks in block_hashes but token_ids still span every full block.
func hybridBatch() []byte {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	full := map[string]any{"type": "BlockStored", "block_hashes": []uint64{11, 12}, "parent_block_hash": nil,
		"token_ids": toks, "block_size": 4, "lora_id": nil, "medium": "GPU", "lora_name": nil,
		"group_idx": 0, "kv_cache_spec_kind": "full_attention"}
	sw := map[string]any{"type": "BlockStored", "block_hashes": []uint64{12}, "parent_block_hash": 11,
		"token_ids": toks, "block_size": 4, "lora_id": nil, "medium": "GPU", "lora_name": nil,
		"group_idx": 1, "kv_cache_spec_kind": "sliding_window", "kv_cache_spec_sliding_window": 4}
	b, err := msgpack.Marshal(map[string]any{"ts": 1.7e9, "events": []any{full, sw}, "data_parallel_rank": 0})
	if err != nil {
		panic(err)
	}
	return b
}

func TestHybridSlidingWindowStoreSkipped(t *testing.T) {
	var d VLLMDecoder
	b, err := d.Decode(hybridBatch(), 7)
	if err != nil {
		t.Fatalf("the full-attention group's store is lost with the whole batch: %v", err)
	}
	if len(b.Events) != 1 || b.Events[0].Kind != engine.KindStored || len(b.Events[0].Blocks) != 2 {
		t.Fatalf("want only the full-attention store, got %+v", b.Events)
	}
}

// A sliding-window group's BlockRemoved (its window moved on) names a hash
// the full-attention group still holds: it is skipped, not applied.
func TestHybridSlidingWindowRemovalSkipped(t *testing.T) {
	rm := map[string]any{"type": "BlockRemoved", "block_hashes": []uint64{11}, "medium": "GPU", "group_idx": 1}
	p, _ := msgpack.Marshal(map[string]any{"ts": 1.7e9, "events": []any{rm}})
	var d VLLMDecoder
	d.Decode(hybridBatch(), 7) // the engine's stores name group 1's kind
	b, err := d.Decode(p, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 0 {
		t.Fatalf("group 1's removal applied to the worker: %+v", b.Events)
	}
}

// Through the source: a hybrid batch is applied, not handled as
// undecodable (which cleared the worker, so that the full-attention blocks
// were never indexed; found by audit), and the skipped store is counted.
func TestHybridBatchDoesNotClearWorker(t *testing.T) {
	st := &fakeStore{}
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, testOptions())
	msg := func(seq uint64, p []byte) [][]byte { return [][]byte{[]byte("t"), be64(seq), p} }
	for i, p := range [][]byte{batchPayload(0), hybridBatch()} {
		if err := src.handle(t.Context(), msg(uint64(i), p)); err != nil {
			t.Fatal(err)
		}
	}
	bs := st.snapshot()
	last := bs[len(bs)-1].events
	for _, ev := range last {
		if ev.Kind == engine.KindCleared {
			t.Fatalf("batch 1 cleared the worker: %+v (errors %v)", last, src.Stats().Errors)
		}
	}
	if got := src.Stats().OtherGroup; got != 1 {
		t.Fatalf("OtherGroup %d, want 1", got)
	}
}

// The array form carries the same fields in vLLM's order (extra_keys,
// group_idx, kv_cache_spec_kind after lora_name; group_idx after medium in
// a removal).
func TestHybridArrayForm(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	full := []any{"BlockStored", []uint64{11, 12}, nil, toks, 4, nil, "GPU", nil, nil, 0, "full_attention", nil}
	sw := []any{"BlockStored", []uint64{12}, 11, toks, 4, nil, "GPU", nil, nil, 1, "sliding_window", 4}
	rmSW := []any{"BlockRemoved", []uint64{11}, "GPU", 1}
	rmFull := []any{"BlockRemoved", []uint64{12}, "GPU", 0}
	p, err := msgpack.Marshal([]any{1.7e9, []any{full, sw, rmSW, rmFull}, 0})
	if err != nil {
		t.Fatal(err)
	}
	var d VLLMDecoder
	b, err := d.Decode(p, 7)
	if err != nil {
		t.Fatal(err)
	}
	if b.OtherGroup != 2 || len(b.Events) != 2 || b.Events[0].Kind != engine.KindStored || b.Events[1].Kind != engine.KindRemoved || b.Events[1].BlockHashes[0] != 12 {
		t.Fatalf("want the full group's store and removal, two skipped; got %+v (skipped %d)", b.Events, b.OtherGroup)
	}
}

// The partial groups outlive a restart of kvidx: they are recorded in the
// WAL with the batch that taught them, and a source on the same store skips
// such a group's removal before any store of it (a removal names only its
// group).
func TestHybridGroupsRecorded(t *testing.T) {
	st := &fakeStore{}
	msg := func(seq uint64, p []byte) [][]byte { return [][]byte{[]byte("t"), be64(seq), p} }
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, testOptions())
	if err := src.handle(t.Context(), msg(0, hybridBatch())); err != nil {
		t.Fatal(err)
	}
	_, pos := st.Applied()
	found := false
	for _, p := range pos {
		if p.Source == src.Name()+groupsMark {
			found = p.Seq == 1<<1
		}
	}
	if !found {
		t.Fatalf("positions %v: want %s%s = group 1", pos, src.Name(), groupsMark)
	}

	again := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, testOptions())
	again.restore()
	rm := map[string]any{"type": "BlockRemoved", "block_hashes": []uint64{11}, "medium": "GPU", "group_idx": 1}
	p, err := msgpack.Marshal(map[string]any{"ts": 1.7e9 + 1, "events": []any{rm}})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.handle(t.Context(), msg(1, p)); err != nil {
		t.Fatal(err)
	}
	bs := st.snapshot()
	for _, ev := range bs[len(bs)-1].events {
		if ev.Kind == engine.KindRemoved {
			t.Fatalf("after a restart, group 1's removal was applied: %+v", bs[len(bs)-1].events)
		}
	}
	if got := again.Stats().OtherGroup; got != 1 {
		t.Fatalf("OtherGroup %d after the restart, want 1", got)
	}
}
