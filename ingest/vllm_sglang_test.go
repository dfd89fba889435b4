package ingest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// SGLang from 0.5.18 (sgl-project/sglang PR 30827,
// python/sglang/srt/disaggregation/kv_events.py) publishes a store whose
// radix node carries a cache_salt as BlockStoredWithMetadata: the seven
// positional elements of its BlockStored (tag, block_hashes,
// parent_block_hash, token_ids, block_size, lora_id, medium) and then a
// BlockStoredMetadata struct, a map {"cache_salt": ...} (session_id too
// from PR 37482), where vLLM's array form has lora_name. The batch, and
// the unsalted stores in it, must still decode.
func TestSGLangStoreWithMetadataMapDecodes(t *testing.T) {
	tok := tokens(4, 1)
	m := newMP().arr(3).f(1.7e9).arr(3)
	m.arr(7).str("BlockStored").arr(1).i(-5).null().us(tok...).u(4).null().str("GPU")
	m.arr(8).str("BlockStored").arr(1).i(-6).i(-5).us(tokens(4, 5)...).u(4).null().str("GPU").
		mapl(2).str("cache_salt").str("tenant-a").str("session_id").str("s1")
	m.arr(2).str("BlockRemoved").arr(1).i(-5)
	m.u(0) // attn_dp_rank
	b, err := new(VLLMDecoder).Decode(m.bytes(), 7)
	if err != nil {
		t.Fatalf("SGLang BlockStoredWithMetadata: batch lost: %v", err)
	}
	w := engine.WorkerKey{WorkerID: 7}
	want := []engine.Event{
		{Worker: w, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: uint64(1<<64 - 5), TokensHash: local(tok, 4, "")[0]}}},
		{Worker: w, Kind: engine.KindStored, HasParent: true, ParentHash: uint64(1<<64 - 5),
			Blocks: []engine.Block{{BlockHash: uint64(1<<64 - 6), TokensHash: local(tokens(4, 5), 4, "")[0]}}},
		{Worker: w, Kind: engine.KindRemoved, BlockHashes: []uint64{1<<64 - 5}},
	}
	if !reflect.DeepEqual(b.Events, want) {
		t.Fatalf("got %+v\nwant %+v", b.Events, want)
	}
}

// After PR 37482 SGLang's events are tagged maps with cache_salt and
// session_id keys of their own: unknown keys, skipped.
func TestSGLangMapStoreWithCacheSaltDecodes(t *testing.T) {
	b := reviewBatch(t, map[string]any{"type": "BlockStored", "block_hashes": []int64{-5}, "parent_block_hash": nil,
		"token_ids": []uint32{1, 2, 3, 4}, "block_size": 4, "lora_id": nil, "medium": "GPU",
		"cache_salt": "tenant-a", "session_id": "s1"})
	got, err := new(VLLMDecoder).Decode(b, 7)
	if err != nil || len(got.Events) != 1 {
		t.Fatalf("got %+v, %v", got.Events, err)
	}
}

// Under EAGLE speculative decoding SGLang's radix cache keys pages by
// bigrams, and its BlockStored token_ids holds [t_i, t_i+1] pairs, one a
// position (sgl-project/sglang PR 39610, docs/docs/advanced_features/
// kv_events.mdx; ai-dynamo/dynamo lib/kv-router/src/zmq_wire/types.rs,
// KvTokenIds::Bigram). The block is the pairs' first tokens.
func TestSGLangEagleBigramTokenIDsDecode(t *testing.T) {
	tok := tokens(5, 1) // a page of 4 bigrams over tokens 1..5
	m := newMP().arr(3).f(1.7e9).arr(1)
	m.arr(7).str("BlockStored").arr(1).i(-5).null().arr(4)
	for i := range 4 {
		m.us(tok[i], tok[i+1])
	}
	m.u(4).null().str("GPU")
	m.u(0)
	b, err := new(VLLMDecoder).Decode(m.bytes(), 7)
	if err != nil {
		t.Fatalf("EAGLE bigram token_ids: batch lost: %v", err)
	}
	want := []engine.Event{{Worker: engine.WorkerKey{WorkerID: 7}, Kind: engine.KindStored,
		Blocks: []engine.Block{{BlockHash: uint64(1<<64 - 5), TokensHash: local(tok[:4], 4, "")[0]}}}}
	if !reflect.DeepEqual(b.Events, want) {
		t.Fatalf("got %+v\nwant %+v", b.Events, want)
	}
}

// A token_ids element that is an array but not a pair is no bigram.
func TestTokenIDsArrayOtherThanPairRefused(t *testing.T) {
	m := newMP().arr(2).f(1.7e9).arr(1)
	m.arr(7).str("BlockStored").arr(1).u(5).null().arr(1).us(1, 2, 3).u(1).null().str("GPU")
	if _, err := new(VLLMDecoder).Decode(m.bytes(), 7); err == nil || !strings.Contains(err.Error(), "token_ids[0]") {
		t.Fatalf("got %v, want an error naming token_ids[0]", err)
	}
}

// SGLang with --enable-kv-events-component-types labels what a store or
// removal is about: a store carries component_types (a list of "full",
// "swa", "mamba") where vLLM has lora_name, a removal one label where vLLM
// has group_idx (sgl-project/sglang python/sglang/srt/mem_cache/events.py,
// and its kv-indexer bridge's decoder). The full-attention KV is what the
// index holds: a store or removal that leaves it out is skipped and
// counted as another group's; the list was refused as a LoRA name before,
// losing the batch.
func TestSGLangComponentLabels(t *testing.T) {
	tok := tokens(4, 1)
	store := func(m *mp, hash int64, labels ...string) {
		m.arr(8).str("BlockStored").arr(1).i(hash).null().us(tok...).u(4).null().str("GPU").arr(len(labels))
		for _, l := range labels {
			m.str(l)
		}
	}
	remove := func(m *mp, hash int64, label string) {
		m.arr(4).str("BlockRemoved").arr(1).i(hash).str("GPU").str(label)
	}
	m := newMP().arr(3).f(1.7e9).arr(6)
	store(m, -5, "full", "swa") // indexed
	store(m, -6, "swa")         // skipped
	store(m, -7, "mamba")       // skipped
	remove(m, -5, "swa")        // skipped: the full KV stays
	remove(m, -5, "mamba")      // skipped
	remove(m, -5, "full")       // applied
	m.u(0)
	b, err := new(VLLMDecoder).Decode(m.bytes(), 7)
	if err != nil {
		t.Fatalf("component-labelled batch lost: %v", err)
	}
	w := engine.WorkerKey{WorkerID: 7}
	want := []engine.Event{
		{Worker: w, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: uint64(1<<64 - 5), TokensHash: local(tok, 4, "")[0]}}},
		{Worker: w, Kind: engine.KindRemoved, BlockHashes: []uint64{1<<64 - 5}},
	}
	if !reflect.DeepEqual(b.Events, want) {
		t.Fatalf("got %+v\nwant %+v", b.Events, want)
	}
	if b.OtherGroup != 4 {
		t.Fatalf("other_group %d, want 4", b.OtherGroup)
	}
	// The same by name (a map-form event).
	mm := newMP().arr(2).f(1.7e9).arr(2)
	mm.mapl(6).str("type").str("BlockStored").str("block_hashes").arr(1).i(-8).str("token_ids").us(tok...).
		str("block_size").u(4).str("medium").str("GPU").str("component_types").arr(1).str("swa")
	mm.mapl(4).str("type").str("BlockRemoved").str("block_hashes").arr(1).i(-5).str("medium").str("GPU").str("component_type").str("full")
	b, err = new(VLLMDecoder).Decode(mm.bytes(), 7)
	if err != nil || len(b.Events) != 1 || b.Events[0].Kind != engine.KindRemoved || b.OtherGroup != 1 {
		t.Fatalf("map form: got %+v (other_group %d), %v; want the full removal alone", b.Events, b.OtherGroup, err)
	}
}
