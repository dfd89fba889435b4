package eventjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// FuzzDecodeEvent feeds arbitrary lines to the decoder: it must never panic,
// must accept only valid JSON, and whatever it accepts must re-encode to a
// line that decodes to the same event (and re-encodes to the same bytes).
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{
		`{"worker_id":7,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":11,"tokens_hash":101}]}}}}`,
		`{"worker_id":7,"event":{"event_id":2,"dp_rank":0,"data":{"stored":{"parent_hash":11,"start_position":null,"blocks":[{"block_hash":12,"tokens_hash":102}]}}}}`,
		`{"worker_id":7,"event":{"event_id":3,"dp_rank":0,"data":{"removed":{"block_hashes":[12]}}}}`,
		`{"worker_id":7,"event":{"event_id":4,"dp_rank":0,"data":"cleared"}}`,
		`{"worker_id":7,"event":{"event_id":5,"dp_rank":0,"data":"worker_removed"}}`,
		`{"wal_index":3,"worker_id":1,"x":[{"y":"\u00e9\ud83d\ude00\\"}],"event":{"data":{"removed":{"block_hashes":[]}}}}`,
		`{"worker_id":1,"event":{"data":{"stored":{"start_position":4294967294,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}`,
		`{"worker_id":-1,"event":{"data":"bogus"}}`,
		`{"worker_id":1e3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := DecodeEvent(line)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if !json.Valid(line) {
			t.Fatalf("decoded invalid JSON %q", line)
		}
		enc := AppendEvent(nil, &ev)
		back, err := DecodeEvent(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !reflect.DeepEqual(back, ev) {
			t.Fatalf("roundtrip of %q via %s:\n got %+v\nwant %+v", line, enc, back, ev)
		}
		if enc2 := AppendEvent(nil, &back); string(enc2) != string(enc) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzEncodeEvent builds canonical events from fuzz input and checks that
// Decode(Encode(ev)) == ev, covering values (hashes near 2^64, odd flag
// combinations) that hand-written lines rarely reach.
func FuzzEncodeEvent(f *testing.F) {
	f.Add(uint64(7), uint32(0), uint64(1), uint8(1), true, uint64(11), false, uint64(0), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add(uint64(1<<64-1), uint32(1<<32-1), uint64(1<<64-1), uint8(2), false, uint64(0), true, uint64(1<<64-1), []byte{})
	f.Add(uint64(0), uint32(3), uint64(0), uint8(3), false, uint64(0), false, uint64(0), []byte{0xff})
	f.Add(uint64(0), uint32(3), uint64(0), uint8(4), false, uint64(0), false, uint64(0), []byte{})
	f.Fuzz(func(t *testing.T, worker uint64, rank uint32, id uint64, kind uint8, hasParent bool, parent uint64, hasStart bool, start uint64, raw []byte) {
		ev := engine.Event{Worker: engine.WorkerKey{WorkerID: worker, DPRank: rank}, EventID: id, Kind: engine.EventKind(kind%4 + 1)}
		var words []uint64
		for len(raw) >= 8 {
			words = append(words, binary.LittleEndian.Uint64(raw))
			raw = raw[8:]
		}
		switch ev.Kind {
		case engine.KindStored:
			if len(words) < 2 {
				words = append(words, 0, 0)
			}
			for i := 0; i+1 < len(words); i += 2 {
				ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: words[i], TokensHash: words[i+1]})
			}
			if hasParent {
				ev.HasParent, ev.ParentHash = true, parent
			}
			if hasStart {
				ev.HasStartPosition, ev.StartPosition = true, start
			}
		case engine.KindRemoved:
			ev.BlockHashes = words
		}
		enc := AppendEvent(nil, &ev)
		back, err := DecodeEvent(enc)
		if err != nil {
			t.Fatalf("DecodeEvent(%s): %v", enc, err)
		}
		if !reflect.DeepEqual(back, ev) {
			t.Fatalf("roundtrip via %s:\n got %+v\nwant %+v", enc, back, ev)
		}
		withIndex := AppendEventWithIndex(nil, id, &ev)
		if back, err = DecodeEvent(withIndex); err != nil || !reflect.DeepEqual(back, ev) {
			t.Fatalf("roundtrip via %s: %+v, %v", withIndex, back, err)
		}
	})
}

// FuzzDecodeQuery: no panic, only valid JSON accepted, and an accepted query
// answers without panicking on an empty index.
func FuzzDecodeQuery(f *testing.F) {
	for _, s := range []string{
		`{"local_hashes":[1,2,3]}`,
		`{"tokens":[1,2,3,4,5],"block_size":2,"lora_name":"a\u00e9"}`,
		`{"local_hashes":[],"candidates":[{"worker_id":1,"dp_rank":2}]}`,
		`{"tokens":[1],"block_size":18446744073709551615}`,
	} {
		f.Add([]byte(s))
	}
	ix := engine.New()
	f.Fuzz(func(t *testing.T, line []byte) {
		q, err := DecodeQuery(line)
		if err != nil {
			return
		}
		if !json.Valid(line) {
			t.Fatalf("decoded invalid JSON %q", line)
		}
		_ = AppendResult(nil, q.Match(ix), len(q.LocalHashes))
	})
}

// FuzzDecodeBatch: a batch decodes to the events its lines decode to one by
// one, or fails; never panics.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"worker_id":1,"event":{"data":"cleared"}}` + "\n" + `{"worker_id":2,"event":{"data":{"removed":{"block_hashes":[1]}}}}`))
	f.Add([]byte(`[{"worker_id":1,"event":{"data":"cleared"}},{"worker_id":2,"event":{"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := DecodeBatch(body)
		if err != nil {
			return
		}
		if len(evs) == 0 {
			t.Fatal("no events and no error")
		}
		if s := (scanner{data: body}); s.peek() == '[' {
			if !json.Valid(body) {
				t.Fatalf("decoded invalid JSON %q", body)
			}
			return
		}
		i := 0
		for line := range bytes.SplitSeq(body, []byte{'\n'}) {
			if len(bytes.TrimLeft(line, " \t\r")) == 0 {
				continue
			}
			ev, err := DecodeEvent(line)
			if err != nil || !reflect.DeepEqual(ev, evs[i]) {
				t.Fatalf("line %q: %+v, %v; batch gave %+v", line, ev, err, evs[i])
			}
			i++
		}
		if i != len(evs) {
			t.Fatalf("%d lines, %d events", i, len(evs))
		}
	})
}
