package eventjson

import (
	"errors"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// NVIDIA Dynamo's RouterEvent carries storage_tier ("device", the default
// when absent, "host_pinned", "disk", "external") and residency_domain
// ("worker" or "cache_owner"): ai-dynamo/dynamo lib/kv-router/src/
// protocols.rs. A lower tier's removal names the same block hashes as the
// GPU's; read as a GPU event it would take the worker's GPU blocks out of
// the index, and a cache owner's clear would clear the worker.
func TestLowerTierAndCacheOwnerEventsAreNotDeviceEvents(t *testing.T) {
	for _, line := range []string{
		`{"worker_id":7,"storage_tier":"host_pinned","event":{"event_id":1,"dp_rank":0,"data":{"removed":{"block_hashes":[12]}}}}`,
		`{"worker_id":7,"storage_tier":"disk","event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":11,"tokens_hash":101}]}}}}`,
		`{"worker_id":7,"storage_tier":"device","residency_domain":"cache_owner","event":{"event_id":1,"dp_rank":0,"data":"cleared"}}`,
	} {
		ev, err := DecodeEvent([]byte(line))
		if !errors.Is(err, ErrOtherTier) {
			t.Errorf("%s: got %+v, %v; want ErrOtherTier", line, ev, err)
		}
		if _, err := DecodeBatch([]byte(line)); !errors.Is(err, ErrOtherTier) {
			t.Errorf("batch %s: got %v; want ErrOtherTier", line, err)
		}
	}
	for _, line := range []string{
		`{"worker_id":7,"storage_tier":"device","event":{"event_id":1,"dp_rank":0,"data":{"removed":{"block_hashes":[12]}}}}`,
		`{"worker_id":7,"storage_tier":"device","residency_domain":"worker","event":{"event_id":1,"dp_rank":0,"data":"cleared"}}`,
		`{"worker_id":7,"storage_tier":null,"event":{"event_id":1,"dp_rank":0,"data":"cleared"}}`,
	} {
		if _, err := DecodeEvent([]byte(line)); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
}

// A clear names no blocks, so it has no tier: Dynamo's RouterEvent resolves
// a Cleared by its residency_domain alone (reset_scope: absent, all of the
// worker's residency; "worker", the worker's), and clears the worker's
// device blocks whatever storage_tier it carries (targets_primary,
// ai-dynamo/dynamo lib/kv-router/src/protocols.rs). Refused as another
// tier's, it left the worker's GPU blocks in the index after Dynamo's
// router had dropped them.
func TestLowerTierClearOfTheWorkerClearsIt(t *testing.T) {
	for _, line := range []string{
		`{"worker_id":7,"storage_tier":"host_pinned","event":{"event_id":1,"dp_rank":2,"data":"cleared"}}`,
		`{"worker_id":7,"storage_tier":"disk","residency_domain":"worker","event":{"event_id":1,"dp_rank":2,"data":"cleared"}}`,
	} {
		ev, err := DecodeEvent([]byte(line))
		if err != nil || ev.Kind != engine.KindCleared || ev.Worker != (engine.WorkerKey{WorkerID: 7, DPRank: 2}) {
			t.Errorf("%s: got %+v, %v; want the worker's clear", line, ev, err)
		}
	}
	// A cache owner's clear is still not the worker's.
	line := `{"worker_id":7,"storage_tier":"host_pinned","residency_domain":"cache_owner","event":{"data":"cleared"}}`
	if _, err := DecodeEvent([]byte(line)); !errors.Is(err, ErrOtherTier) {
		t.Errorf("%s: %v; want ErrOtherTier", line, err)
	}
}
