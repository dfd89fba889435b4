package eventjson

import (
	"strconv"

	"github.com/kvidx/kvidx/engine"
)

// AppendEvent appends the canonical one-line JSON form of ev to dst, without
// a trailing newline, and returns the extended buffer:
//
//	{"worker_id":7,"event":{"event_id":2,"dp_rank":0,"data":{"stored":{"parent_hash":11,"blocks":[{"block_hash":12,"tokens_hash":102}]}}}}
//
// Only the fields ev.Kind uses are written; "parent_hash" and "start_position"
// only when set, "event_id" and "dp_rank" always. [DecodeEvent] reads the
// result back to ev exactly when ev is canonical: fields its kind does not use
// are zero and empty lists are nil. An event of an unknown kind is written
// with data "kind(N)", and a Stored event without blocks with an empty
// "blocks" array; the decoder rejects both, so neither can be replayed as
// something else.
func AppendEvent(dst []byte, ev *engine.Event) []byte {
	dst = append(dst, `{"worker_id":`...)
	return appendEventRest(dst, ev)
}

// AppendEventWithIndex is [AppendEvent] with a leading "wal_index" key, the
// form of `kvidx wal dump`. The decoder ignores the key, so a dump replays as is.
func AppendEventWithIndex(dst []byte, walIndex uint64, ev *engine.Event) []byte {
	dst = append(dst, `{"wal_index":`...)
	dst = strconv.AppendUint(dst, walIndex, 10)
	dst = append(dst, `,"worker_id":`...)
	return appendEventRest(dst, ev)
}

// appendEventRest writes everything after `"worker_id":`.
func appendEventRest(dst []byte, ev *engine.Event) []byte {
	dst = strconv.AppendUint(dst, ev.Worker.WorkerID, 10)
	dst = append(dst, `,"event":{"event_id":`...)
	dst = strconv.AppendUint(dst, ev.EventID, 10)
	dst = append(dst, `,"dp_rank":`...)
	dst = strconv.AppendUint(dst, uint64(ev.Worker.DPRank), 10)
	dst = append(dst, `,"data":`...)
	switch ev.Kind {
	case engine.KindStored:
		dst = append(dst, `{"stored":{`...)
		if ev.HasParent {
			dst = append(dst, `"parent_hash":`...)
			dst = strconv.AppendUint(dst, ev.ParentHash, 10)
			dst = append(dst, ',')
		}
		if ev.HasStartPosition {
			dst = append(dst, `"start_position":`...)
			dst = strconv.AppendUint(dst, ev.StartPosition, 10)
			dst = append(dst, ',')
		}
		dst = append(dst, `"blocks":[`...)
		for i, b := range ev.Blocks {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"block_hash":`...)
			dst = strconv.AppendUint(dst, b.BlockHash, 10)
			dst = append(dst, `,"tokens_hash":`...)
			dst = strconv.AppendUint(dst, b.TokensHash, 10)
			dst = append(dst, '}')
		}
		dst = append(dst, "]}}"...)
	case engine.KindRemoved:
		dst = append(dst, `{"removed":{"block_hashes":`...)
		dst = appendUintArray(dst, ev.BlockHashes)
		dst = append(dst, "}}"...)
	default:
		// "cleared", "worker_removed", or an unknown kind's "kind(N)".
		dst = strconv.AppendQuote(dst, ev.Kind.String())
	}
	return append(dst, "}}"...)
}

func appendUintArray(dst []byte, vs []uint64) []byte {
	dst = append(dst, '[')
	for i, v := range vs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, v, 10)
	}
	return append(dst, ']')
}
