package ingest

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func reviewBatch(t *testing.T, evs ...any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(map[string]any{"ts": 1.7e9, "events": evs, "data_parallel_rank": 0})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func reviewStore(hashes []uint64, group int, kind any) map[string]any {
	m := map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": nil,
		"token_ids": []uint32{1, 2, 3, 4, 5, 6, 7, 8}, "block_size": 4, "lora_id": nil, "medium": "GPU",
		"lora_name": nil, "group_idx": group}
	if kind != nil {
		m["kv_cache_spec_kind"] = kind
	}
	return m
}

// vLLM 0.18 to 0.21 (before kv_cache_spec_kind, PR 40984): BlockStored
// carries group_idx but no kind. A hybrid model's sliding-window store
// (null blocks left out of block_hashes) still fails the whole batch, and
// the full-attention store with it.
func TestHybridGroupIdxWithoutKind(t *testing.T) {
	var d VLLMDecoder
	_, err := d.Decode(reviewBatch(t, reviewStore([]uint64{11, 12}, 0, nil), reviewStore([]uint64{12}, 1, nil)), 7)
	if err != nil {
		t.Fatalf("group_idx without kv_cache_spec_kind: batch lost: %v", err)
	}
}

// "unknown" (get_kv_cache_spec_kind of a UniformTypeKVCacheSpecs mixing
// kinds, or a spec class vLLM does not classify) is taken for full
// attention: a window group so named fails the whole batch.
func TestHybridUnknownKind(t *testing.T) {
	var d VLLMDecoder
	_, err := d.Decode(reviewBatch(t, reviewStore([]uint64{11, 12}, 0, "full_attention"), reviewStore([]uint64{12}, 1, "unknown")), 7)
	if err != nil {
		t.Fatalf("kind unknown: batch lost: %v", err)
	}
}

// A model whose only KV-cache group is a sliding-window one (every layer
// windowed): no full-attention group holds its blocks, yet every store is
// group_idx >= 64: its stores are skipped by kind but its removals are
// A batch that fails to decode still teaches the decoder: a garbled store
// naming group 0 "mamba" makes later full-attention removals of group 0
// skipped, although the batch was discarded.
func TestHybridFailedBatchTeachesNothing(t *testing.T) {
	var d VLLMDecoder
	bad := reviewBatch(t, reviewStore([]uint64{11, 12}, 0, "mamba"), map[string]any{"type": "BlockStored", "block_hashes": []uint64{1}, "token_ids": []uint32{1}, "block_size": 4})
	bad = append(bad, 0xc1) // trailing garbage: the batch fails
	if _, err := d.Decode(bad, 7); err == nil {
		t.Fatal("want a decode error")
	}
	b, err := d.Decode(reviewBatch(t, map[string]any{"type": "BlockRemoved", "block_hashes": []uint64{11}, "medium": "GPU", "group_idx": 0}), 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 {
		t.Fatalf("group 0's removal skipped after a failed batch taught group 0 (partial %b)", d.PartialGroups())
	}
}

// An event class kvidx does not know, whose group_idx is negative: medium
// and lora_id of another shape read as absent and fail nothing; group_idx
