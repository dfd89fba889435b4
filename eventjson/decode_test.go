package eventjson

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

func blk(blockHash, tokensHash uint64) engine.Block {
	return engine.Block{BlockHash: blockHash, TokensHash: tokensHash}
}

func TestDecodeEventExamples(t *testing.T) {
	w7 := engine.WorkerKey{WorkerID: 7}
	tests := []struct {
		line string
		want engine.Event
	}{
		{`{"worker_id":7,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":11,"tokens_hash":101}]}}}}`,
			engine.Event{Worker: w7, EventID: 1, Kind: engine.KindStored, Blocks: []engine.Block{blk(11, 101)}}},
		{`{"worker_id":7,"event":{"event_id":2,"dp_rank":0,"data":{"stored":{"parent_hash":11,"start_position":null,"blocks":[{"block_hash":12,"tokens_hash":102}]}}}}`,
			engine.Event{Worker: w7, EventID: 2, Kind: engine.KindStored, HasParent: true, ParentHash: 11, Blocks: []engine.Block{blk(12, 102)}}},
		{`{"worker_id":7,"event":{"event_id":3,"dp_rank":0,"data":{"removed":{"block_hashes":[12]}}}}`,
			engine.Event{Worker: w7, EventID: 3, Kind: engine.KindRemoved, BlockHashes: []uint64{12}}},
		{`{"worker_id":7,"event":{"event_id":4,"dp_rank":0,"data":"cleared"}}`,
			engine.Event{Worker: w7, EventID: 4, Kind: engine.KindCleared}},
		{`{"worker_id":7,"event":{"event_id":5,"dp_rank":0,"data":"worker_removed"}}`,
			engine.Event{Worker: w7, EventID: 5, Kind: engine.KindWorkerRemoved}},
		// Optional fields absent or null; start position 0 is a position, not absence.
		{`{"worker_id":1,"event":{"data":{"stored":{"start_position":0,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}`,
			engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, HasStartPosition: true, Blocks: []engine.Block{blk(1, 2)}}},
		{`{"worker_id":1,"event":{"event_id":null,"dp_rank":null,"data":"cleared"}}`,
			engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}},
		// Extremes.
		{`{"worker_id":18446744073709551615,"event":{"dp_rank":4294967295,"data":{"removed":{"block_hashes":[0,18446744073709551615]}}}}`,
			engine.Event{Worker: engine.WorkerKey{WorkerID: 1<<64 - 1, DPRank: 1<<32 - 1}, Kind: engine.KindRemoved, BlockHashes: []uint64{0, 1<<64 - 1}}},
		// An empty removal is legal and decodes to nil.
		{`{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[]}}}}`,
			engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindRemoved}},
		// Unknown fields at every level, the WAL dump's index, whitespace, field order, escapes.
		{` {"wal_index":9,"x":{"a":[1,{"b":null}],"s":"\"\\"},"event":{"data":{"removed":{"block_hashes":[3],"y":true}},"z":-1.5e3},"worker_id":2}` + "\r\n",
			engine.Event{Worker: engine.WorkerKey{WorkerID: 2}, Kind: engine.KindRemoved, BlockHashes: []uint64{3}}},
		{`{"worker_id":2,"event":{"dp_rank":3,"data":{"stored":{"blocks":[{"lora_id":5,"block_hash":1,"tokens_hash":2,"mm":{"k":[]}}],"extra":"x"}}}}`,
			engine.Event{Worker: engine.WorkerKey{WorkerID: 2, DPRank: 3}, Kind: engine.KindStored, Blocks: []engine.Block{blk(1, 2)}}},
		{`{"worker\u005fid":2,"event":{"data":"clear\u0065d"}}`,
			engine.Event{Worker: engine.WorkerKey{WorkerID: 2}, Kind: engine.KindCleared}},
	}
	for _, tt := range tests {
		got, err := DecodeEvent([]byte(tt.line))
		if err != nil {
			t.Errorf("DecodeEvent(%s): %v", tt.line, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeEvent(%s)\n got %+v\nwant %+v", tt.line, got, tt.want)
		}
	}
}

func TestDecodeEventErrors(t *testing.T) {
	const (
		pre  = `{"worker_id":1,"event":{"data":`
		post = `}}`
	)
	stored := func(body string) string { return pre + `{"stored":` + body + `}` + post }
	tests := []struct {
		name, line, want string
	}{
		// Malformed JSON.
		{"empty", ``, "unexpected end of input"},
		{"not json", `hello`, `unexpected 'h'`},
		{"byte order mark", "\xEF\xBB\xBF{\"worker_id\":1,\"event\":{\"data\":\"cleared\"}}", "unexpected byte order mark"},
		{"non-ASCII byte", "\xC3\xA9", "unexpected byte 0xC3"},
		{"truncated", `{"worker_id":1,"event":{"data":"cleared"}`, "unexpected end of input"},
		{"unterminated string", `{"worker_id":1,"event":{"data":"cleared}}`, "unterminated string"},
		{"bad escape", `{"worker_id":1,"event":{"data":"\q"}}`, `invalid escape '\q'`},
		{"control char", "{\"worker_id\":1,\"x\":\"a\tb\",\"event\":{\"data\":\"cleared\"}}", "control character"},
		{"trailing comma", `{"worker_id":1,"event":{"data":"cleared"},}`, "want a string key"},
		{"missing colon", `{"worker_id" 1}`, `want ':'`},
		{"bad literal", `{"x":nul,"worker_id":1}`, "invalid literal"},
		{"leading zero", `{"worker_id":01,"event":{"data":"cleared"}}`, "leading zero"},
		{"bad number", `{"worker_id":1-2,"event":{"data":"cleared"}}`, "want the end of the number"},
		{"bad skipped number", `{"x":-,"worker_id":1,"event":{"data":"cleared"}}`, "want a digit"},
		{"deep nesting", `{"x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, "nesting deeper"},
		{"trailing garbage", `{"worker_id":1,"event":{"data":"cleared"}} x`, "trailing data \"x\""},
		{"two objects", `{"worker_id":1,"event":{"data":"cleared"}}{}`, "trailing data"},
		{"not an object", `[1]`, "expected an object, found an array"},
		// Missing, null or duplicate required fields.
		{"missing worker_id", `{"event":{"data":"cleared"}}`, "worker_id: required field missing"},
		{"null worker_id", `{"worker_id":null,"event":{"data":"cleared"}}`, "worker_id: must not be null"},
		{"missing event", `{"worker_id":1}`, "event: required field missing"},
		{"null event", `{"worker_id":1,"event":null}`, "event: must not be null"},
		{"missing data", `{"worker_id":1,"event":{"event_id":1}}`, "event.data: required field missing"},
		{"null data", pre + `null` + post, "event.data: must not be null"},
		{"missing blocks", stored(`{"parent_hash":1}`), "event.data.stored.blocks: required field missing"},
		{"null blocks", stored(`{"blocks":null}`), "event.data.stored.blocks: must not be null"},
		{"empty blocks", stored(`{"blocks":[]}`), "event.data.stored.blocks: empty array"},
		{"null stored", stored(`null`), "event.data.stored: must not be null"},
		{"missing block_hash", stored(`{"blocks":[{"block_hash":1,"tokens_hash":2},{"tokens_hash":2}]}`), "event.data.stored.blocks[1].block_hash: required field missing"},
		{"missing tokens_hash", stored(`{"blocks":[{"block_hash":1}]}`), "event.data.stored.blocks[0].tokens_hash: required field missing"},
		{"null block", stored(`{"blocks":[null]}`), "event.data.stored.blocks[0]: must not be null"},
		{"missing block_hashes", pre + `{"removed":{}}` + post, "event.data.removed.block_hashes: required field missing"},
		{"null block_hashes", pre + `{"removed":{"block_hashes":null}}` + post, "event.data.removed.block_hashes: must not be null"},
		{"duplicate worker_id", `{"worker_id":1,"worker_id":2,"event":{"data":"cleared"}}`, "worker_id: duplicate field"},
		{"duplicate block_hash", stored(`{"blocks":[{"block_hash":1,"block_hash":1,"tokens_hash":2}]}`), "blocks[0].block_hash: duplicate field"},
		// Numbers that are not plain unsigned 64-bit integers.
		{"negative", `{"worker_id":-1,"event":{"data":"cleared"}}`, "worker_id: negative number -1"},
		{"negative zero", `{"worker_id":-0,"event":{"data":"cleared"}}`, "negative number -0"},
		{"fractional", `{"worker_id":1.5,"event":{"data":"cleared"}}`, "worker_id: fractional number 1.5"},
		{"fractional integral", `{"worker_id":1.0,"event":{"data":"cleared"}}`, "fractional number 1.0"},
		{"exponent", `{"worker_id":1e3,"event":{"data":"cleared"}}`, "worker_id: number 1e3 in exponent form"},
		{"over 64 bits", `{"worker_id":18446744073709551616,"event":{"data":"cleared"}}`, "worker_id: number 18446744073709551616 overflows 64 bits"},
		{"way over 64 bits", `{"worker_id":` + strings.Repeat("9", 100) + `,"event":{"data":"cleared"}}`, "overflows 64 bits"},
		{"dp_rank over 32 bits", `{"worker_id":1,"event":{"dp_rank":4294967296,"data":"cleared"}}`, "event.dp_rank: number 4294967296 overflows 32 bits"},
		{"string number", `{"worker_id":"1","event":{"data":"cleared"}}`, "worker_id: expected an unsigned integer, found a string"},
		{"bool number", `{"worker_id":true,"event":{"data":"cleared"}}`, "found a boolean"},
		{"string event_id", `{"worker_id":1,"event":{"event_id":"1","data":"cleared"}}`, "event.event_id: expected an unsigned integer, found a string"},
		{"negative parent", stored(`{"parent_hash":-3,"blocks":[{"block_hash":1,"tokens_hash":2}]}`), "event.data.stored.parent_hash: negative number -3"},
		{"fractional start", stored(`{"start_position":2.5,"blocks":[{"block_hash":1,"tokens_hash":2}]}`), "event.data.stored.start_position: fractional number 2.5"},
		{"string tokens_hash", stored(`{"blocks":[{"block_hash":1,"tokens_hash":"2"}]}`), "event.data.stored.blocks[0].tokens_hash: expected an unsigned integer, found a string"},
		{"exponent removed", pre + `{"removed":{"block_hashes":[1,2E2]}}` + post, "event.data.removed.block_hashes[1]: number 2E2 in exponent form"},
		// Unknown or ambiguous kinds.
		{"unknown kind string", pre + `"bogus"` + post, `event.data: unknown kind "bogus"`},
		{"unit kind as string", pre + `"stored"` + post, `event.data: unknown kind "stored"`},
		{"unknown kind object", pre + `{"bogus":{}}` + post, `event.data: unknown kind "bogus"`},
		{"unit kind as object", pre + `{"cleared":{}}` + post, `event.data: unknown kind "cleared"`},
		{"empty data object", pre + `{}` + post, `event.data: empty object`},
		{"both kinds", pre + `{"removed":{"block_hashes":[]},"stored":{"blocks":[{"block_hash":1,"tokens_hash":2}]}}` + post, `event.data: both "stored" and "removed" given`},
		{"kind twice", pre + `{"removed":{"block_hashes":[]},"removed":{"block_hashes":[]}}` + post, `event.data.removed: duplicate field`},
		{"extra data key", pre + `{"removed":{"block_hashes":[]},"x":1}` + post, `event.data: unexpected second key "x"`},
		{"data number", pre + `3` + post, "event.data: expected a string or an object, found a number"},
		{"data array", pre + `[]` + post, "event.data: expected a string or an object, found an array"},
		{"blocks not array", stored(`{"blocks":{}}`), "event.data.stored.blocks: expected an array, found an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := DecodeEvent([]byte(tt.line))
			if err == nil {
				t.Fatalf("DecodeEvent(%s) = %+v, want error containing %q", tt.line, ev, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeEvent(%s) error\n %q\nwant it to contain %q", tt.line, err, tt.want)
			}
			if !reflect.DeepEqual(ev, engine.Event{}) {
				t.Fatalf("DecodeEvent returned %+v with its error, want the zero event", ev)
			}
		})
	}
}

func TestDecodeErrorIsShortForLongInput(t *testing.T) {
	line := `{"worker_id":1,"event":{"data":"` + strings.Repeat("x", 1<<20) + `"}}`
	_, err := DecodeEvent([]byte(line))
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("error %.300q: want a short error", err)
	}
}

func TestDecoderReusesBuffers(t *testing.T) {
	line := []byte(`{"worker_id":7,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":5,"blocks":[{"block_hash":11,"tokens_hash":101},{"block_hash":12,"tokens_hash":102}]}}}}`)
	removed := []byte(`{"worker_id":7,"event":{"data":{"removed":{"block_hashes":[11,12]}}}}`)
	var d Decoder
	var ev engine.Event
	allocs := testing.AllocsPerRun(100, func() {
		if err := d.Decode(line, &ev); err != nil {
			t.Fatal(err)
		}
		if err := d.Decode(removed, &ev); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Decoder.Decode allocates %v times per pair of events, want 0", allocs)
	}
	// A failed decode leaves the event zero, not half-filled.
	if err := d.Decode([]byte(`{"worker_id":7,"event":{"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":1},{}]}}}}`), &ev); err == nil {
		t.Fatal("want error")
	}
	if !reflect.DeepEqual(ev, engine.Event{}) {
		t.Errorf("after error ev = %+v, want zero", ev)
	}
}

func TestDecodeRejectsNUL(t *testing.T) {
	for _, line := range []string{
		"{\"worker_id\":1,\"event\":{\"data\":\"cleared\"}}\x00",
		"\x00",
	} {
		if _, err := DecodeEvent([]byte(line)); err == nil {
			t.Errorf("DecodeEvent(%q) succeeded", line)
		}
	}
	if _, err := DecodeBatch([]byte("{\"worker_id\":1,\"event\":{\"data\":\"cleared\"}}\n\x00\n")); err == nil {
		t.Error("DecodeBatch accepted a line holding a NUL byte")
	}
}
