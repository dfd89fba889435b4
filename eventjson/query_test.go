package eventjson

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

func TestDecodeQuery(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	tests := []struct {
		line string
		want Query
	}{
		{`{"local_hashes":[1,2,3]}`, Query{LocalHashes: []uint64{1, 2, 3}}},
		{`{"local_hashes":[]}`, Query{LocalHashes: []uint64{}}},
		{`{"local_hashes":[18446744073709551615],"tokens":null,"x":{"y":[]}}`, Query{LocalHashes: []uint64{1<<64 - 1}}},
		{`{"tokens":[1,2,3,4,5,6,7,8,9],"block_size":4}`, Query{LocalHashes: engine.LocalHashes(nil, toks, 4, "")}},
		{`{"tokens":[1,2,3,4,5,6,7,8,9],"block_size":4,"lora_name":"sql"}`, Query{LocalHashes: engine.LocalHashes(nil, toks, 4, "sql")}},
		{`{"tokens":[1,2,3,4,5,6,7,8,9],"block_size":4,"lora_name":"s\u0071l"}`, Query{LocalHashes: engine.LocalHashes(nil, toks, 4, "sql")}},
		{`{"tokens":[1,2,3,4,5,6,7,8,9],"block_size":4,"lora_name":null}`, Query{LocalHashes: engine.LocalHashes(nil, toks, 4, "")}},
		{`{"tokens":[4294967295],"block_size":1}`, Query{LocalHashes: engine.LocalHashes(nil, []uint32{1<<32 - 1}, 1, "")}},
		// Shorter than one block, or a hostile block size: an empty query, not an allocation.
		{`{"tokens":[1,2,3],"block_size":4}`, Query{LocalHashes: []uint64{}}},
		{`{"tokens":[],"block_size":18446744073709551615}`, Query{LocalHashes: []uint64{}}},
		{`{"local_hashes":[1],"candidates":[{"worker_id":7},{"worker_id":8,"dp_rank":1,"x":0},{"worker_id":9,"dp_rank":null}]}`,
			Query{LocalHashes: []uint64{1}, Candidates: []engine.WorkerKey{{WorkerID: 7}, {WorkerID: 8, DPRank: 1}, {WorkerID: 9}}}},
		{`{"local_hashes":[1],"candidates":[]}`, Query{LocalHashes: []uint64{1}, Candidates: []engine.WorkerKey{}}},
		{`{"local_hashes":[1],"candidates":null}`, Query{LocalHashes: []uint64{1}}},
	}
	for _, tt := range tests {
		got, err := DecodeQuery([]byte(tt.line))
		if err != nil {
			t.Errorf("DecodeQuery(%s): %v", tt.line, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeQuery(%s)\n got %+v\nwant %+v", tt.line, got, tt.want)
		}
		// Presence of candidates is what matters: [] must stay distinguishable from absent.
		if (got.Candidates == nil) != (tt.want.Candidates == nil) {
			t.Errorf("DecodeQuery(%s): candidates nil = %v, want %v", tt.line, got.Candidates == nil, tt.want.Candidates == nil)
		}
	}
}

func TestDecodeQueryErrors(t *testing.T) {
	tests := []struct{ line, want string }{
		{`{}`, `one of "local_hashes" or "tokens" is required`},
		{`{"local_hashes":null}`, `one of "local_hashes" or "tokens" is required`},
		{`{"local_hashes":[1],"tokens":[1],"block_size":1}`, `both "local_hashes" and "tokens" given`},
		{`{"local_hashes":[1],"block_size":4}`, `apply only to "tokens"`},
		{`{"local_hashes":[1],"lora_name":"x"}`, `apply only to "tokens"`},
		{`{"tokens":[1,2]}`, "block_size: required with tokens"},
		{`{"tokens":[1,2],"block_size":0}`, "block_size: must be at least 1"},
		{`{"tokens":[1,2],"block_size":-1}`, "block_size: negative number -1"},
		{`{"tokens":[1,2],"block_size":2.5}`, "block_size: fractional number 2.5"},
		{`{"tokens":[1,4294967296],"block_size":1}`, "tokens[1]: number 4294967296 overflows 32 bits"},
		{`{"tokens":[1,-2],"block_size":1}`, "tokens[1]: negative number -2"},
		{`{"tokens":[1.5],"block_size":1}`, "tokens[0]: fractional number 1.5"},
		{`{"local_hashes":[1,-1]}`, "local_hashes[1]: negative number -1"},
		{`{"local_hashes":[1e2]}`, "local_hashes[0]: number 1e2 in exponent form"},
		{`{"local_hashes":["1"]}`, "local_hashes[0]: expected an unsigned integer, found a string"},
		{`{"local_hashes":1}`, "local_hashes: expected an array, found a number"},
		{`{"local_hashes":[1],"local_hashes":[2]}`, "local_hashes: duplicate field"},
		{`{"tokens":[1],"block_size":1,"lora_name":3}`, "lora_name: expected a string, found a number"},
		{`{"local_hashes":[1],"candidates":[{"dp_rank":1}]}`, "candidates[0].worker_id: required field missing"},
		{`{"local_hashes":[1],"candidates":[{"worker_id":1,"dp_rank":4294967296}]}`, "candidates[0].dp_rank: number 4294967296 overflows 32 bits"},
		{`{"local_hashes":[1],"candidates":[null]}`, "candidates[0]: must not be null"},
		{`{"local_hashes":[1],"candidates":{}}`, "candidates: expected an array, found an object"},
		{`{"local_hashes":[1]} x`, "trailing data"},
		{`[1]`, "expected an object, found an array"},
		{``, "unexpected end of input"},
		// An unknown key is quoted when it is not an identifier: a newline
		// in it must not forge a line of the error output.
		{`{"a\nforged":[1,}`, `"a\nforged": invalid JSON`},
	}
	for _, tt := range tests {
		q, err := DecodeQuery([]byte(tt.line))
		if err == nil {
			t.Errorf("DecodeQuery(%s) = %+v, want error %q", tt.line, q, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeQuery(%s) error\n %q\nwant it to contain %q", tt.line, err, tt.want)
		}
	}
}

func TestQueryMatch(t *testing.T) {
	ix := engine.New()
	for _, ev := range []engine.Event{
		{Worker: engine.WorkerKey{WorkerID: 0}, Kind: engine.KindStored, Blocks: []engine.Block{blk(1, 1), blk(2, 2), blk(3, 3)}},
		{Worker: engine.WorkerKey{WorkerID: 1, DPRank: 2}, Kind: engine.KindStored, Blocks: []engine.Block{blk(1, 1), blk(2, 2)}},
	} {
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct{ query, want string }{
		{`{"local_hashes":[1,2,3]}`, `{"scores":[{"worker_id":0,"dp_rank":0,"matched_blocks":3},{"worker_id":1,"dp_rank":2,"matched_blocks":2}],"query_blocks":3}`},
		{`{"local_hashes":[1,2,3],"candidates":[{"worker_id":1,"dp_rank":2},{"worker_id":5}]}`, `{"scores":[{"worker_id":1,"dp_rank":2,"matched_blocks":2}],"query_blocks":3}`},
		{`{"local_hashes":[1,2,3],"candidates":[{"worker_id":1}]}`, `{"scores":[],"query_blocks":3}`},
		{`{"local_hashes":[1,2,3],"candidates":[]}`, `{"scores":[],"query_blocks":3}`},
		{`{"local_hashes":[]}`, `{"scores":[],"query_blocks":0}`},
		{`{"local_hashes":[2,3]}`, `{"scores":[],"query_blocks":2}`},
	}
	for _, tt := range tests {
		q, err := DecodeQuery([]byte(tt.query))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(AppendResult(nil, q.Match(ix), len(q.LocalHashes))); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.query, got, tt.want)
		}
	}
}

func TestAppendResult(t *testing.T) {
	tests := []struct {
		scores []engine.Score
		blocks int
		want   string
	}{
		{nil, 0, `{"scores":[],"query_blocks":0}`},
		{[]engine.Score{}, 4, `{"scores":[],"query_blocks":4}`},
		{[]engine.Score{{Worker: engine.WorkerKey{WorkerID: 7}, MatchedBlocks: 3}}, 5,
			`{"scores":[{"worker_id":7,"dp_rank":0,"matched_blocks":3}],"query_blocks":5}`},
		{[]engine.Score{{Worker: engine.WorkerKey{WorkerID: 1<<64 - 1, DPRank: 1<<32 - 1}, MatchedBlocks: 2}, {Worker: engine.WorkerKey{WorkerID: 2, DPRank: 1}, MatchedBlocks: 1}}, 2,
			`{"scores":[{"worker_id":18446744073709551615,"dp_rank":4294967295,"matched_blocks":2},{"worker_id":2,"dp_rank":1,"matched_blocks":1}],"query_blocks":2}`},
	}
	for _, tt := range tests {
		if got := string(AppendResult([]byte("x"), tt.scores, tt.blocks)); got != "x"+tt.want {
			t.Errorf("got %s\nwant x%s", got, tt.want)
		}
	}
}

func TestDecodeQueryDefault(t *testing.T) {
	tests := []struct {
		name, in string
		blocks   int
		wantErr  bool
	}{
		{"default applies", `{"tokens":[1,2,3,4,5,6,7,8]}`, 2, false},
		{"null takes the default", `{"tokens":[1,2,3,4,5,6,7,8],"block_size":null}`, 2, false},
		{"explicit wins", `{"tokens":[1,2,3,4,5,6,7,8],"block_size":8}`, 1, false},
		{"local hashes unaffected", `{"local_hashes":[1,2]}`, 2, false},
		{"zero still refused", `{"tokens":[1,2],"block_size":0}`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := DecodeQueryDefault([]byte(tt.in), 4)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if err == nil && len(q.LocalHashes) != tt.blocks {
				t.Fatalf("%d blocks, want %d", len(q.LocalHashes), tt.blocks)
			}
		})
	}
	if _, err := DecodeQuery([]byte(`{"tokens":[1,2,3,4]}`)); err == nil {
		t.Fatal("DecodeQuery must still require block_size with tokens")
	}
}
