package eventjson

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvidx/kvidx/engine"
)

// genCanonicalEvent draws an event in canonical form (see [AppendEvent]):
// only the fields of its kind set, empty lists nil. Numbers are drawn from the
// whole 64-bit range, edges included.
func genCanonicalEvent(t *rapid.T) engine.Event {
	ev := engine.Event{
		Worker:  engine.WorkerKey{WorkerID: rapid.Uint64().Draw(t, "worker_id"), DPRank: rapid.Uint32().Draw(t, "dp_rank")},
		EventID: rapid.Uint64().Draw(t, "event_id"),
		Kind:    engine.EventKind(rapid.IntRange(int(engine.KindStored), int(engine.KindWorkerRemoved)).Draw(t, "kind")),
	}
	switch ev.Kind {
	case engine.KindStored:
		if rapid.Bool().Draw(t, "has_parent") {
			ev.HasParent, ev.ParentHash = true, rapid.Uint64().Draw(t, "parent_hash")
		}
		if rapid.Bool().Draw(t, "has_start") {
			ev.HasStartPosition, ev.StartPosition = true, rapid.Uint64().Draw(t, "start_position")
		}
		ev.Blocks = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) engine.Block {
			return engine.Block{BlockHash: rapid.Uint64().Draw(t, "block_hash"), TokensHash: rapid.Uint64().Draw(t, "tokens_hash")}
		}), 1, 40).Draw(t, "blocks")
	case engine.KindRemoved:
		ev.BlockHashes = rapid.SliceOfN(rapid.Uint64(), 0, 40).Draw(t, "block_hashes")
		if len(ev.BlockHashes) == 0 {
			ev.BlockHashes = nil
		}
	}
	return ev
}

func TestEncodeDecodeRoundtrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := rapid.SliceOfN(rapid.Custom(genCanonicalEvent), 1, 8).Draw(t, "events")
		var body, array []byte
		array = append(array, '[')
		var d Decoder
		for i, ev := range evs {
			line := AppendEvent(nil, &ev)
			got, err := DecodeEvent(line)
			if err != nil || !reflect.DeepEqual(got, ev) {
				t.Fatalf("DecodeEvent(%s) = %+v, %v; want %+v", line, got, err, ev)
			}
			// The reusing Decoder agrees with DecodeEvent.
			var reused engine.Event
			if err := d.Decode(line, &reused); err != nil || !reflect.DeepEqual(reused, ev) {
				t.Fatalf("Decoder.Decode(%s) = %+v, %v; want %+v", line, reused, err, ev)
			}
			walIndex := rapid.Uint64().Draw(t, "wal_index")
			withIndex := AppendEventWithIndex(nil, walIndex, &ev)
			if got, err := DecodeEvent(withIndex); err != nil || !reflect.DeepEqual(got, ev) {
				t.Fatalf("DecodeEvent(%s) = %+v, %v; want %+v", withIndex, got, err, ev)
			}
			body = append(append(body, line...), '\n')
			if i > 0 {
				array = append(array, ',')
			}
			array = append(array, line...)
		}
		array = append(array, ']')
		for _, b := range [][]byte{body, array} {
			got, err := DecodeBatch(b)
			if err != nil || !reflect.DeepEqual(got, evs) {
				t.Fatalf("DecodeBatch(%s) = %+v, %v; want %+v", b, got, err, evs)
			}
		}
	})
}
