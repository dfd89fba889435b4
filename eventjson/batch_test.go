package eventjson

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

func TestDecodeBatch(t *testing.T) {
	const (
		a = `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":10},{"block_hash":2,"tokens_hash":20}]}}}}`
		b = `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1,2]}}}}`
		c = `{"worker_id":2,"event":{"data":{"stored":{"parent_hash":5,"blocks":[{"block_hash":3,"tokens_hash":30}]}}}}`
	)
	want := []engine.Event{
		{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, Blocks: []engine.Block{blk(1, 10), blk(2, 20)}},
		{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindRemoved, BlockHashes: []uint64{1, 2}},
		{Worker: engine.WorkerKey{WorkerID: 2}, Kind: engine.KindStored, HasParent: true, ParentHash: 5, Blocks: []engine.Block{blk(3, 30)}},
	}
	for name, body := range map[string]string{
		"ndjson":             a + "\n" + b + "\n" + c + "\n",
		"ndjson no final nl": a + "\n\n  \n" + b + "\r\n" + c,
		"array":              "[" + a + "," + b + "," + c + "]",
		"array spaced":       " \n[\n " + a + " ,\n" + b + ",\n" + c + "\n]\n",
	} {
		got, err := DecodeBatch([]byte(body))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
		// Events share backing arrays, but appending to one must not clobber the next.
		_ = append(got[0].Blocks, blk(99, 99))
		if got[2].Blocks[0] != (blk(3, 30)) {
			t.Errorf("%s: appending to one event's blocks changed another's", name)
		}
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	const ok = `{"worker_id":1,"event":{"data":"cleared"}}`
	tests := []struct {
		name, body, want string
		line, elem       int // the *LineError or *ElementError expected, if any
	}{
		{name: "empty", body: "", want: "no events"},
		{name: "blank", body: " \n\n", want: "no events"},
		{name: "empty array", body: " [ ] ", want: "no events"},
		{name: "bad line", body: ok + "\n\n" + `{"worker_id":1,"event":{"data":"bogus"}}` + "\n", want: `line 3: event.data: unknown kind "bogus"`, line: 3},
		{name: "garbage line", body: ok + "\nnope", want: "line 2: invalid JSON", line: 2},
		{name: "two per line", body: ok + ok, want: "line 1: invalid JSON at offset 42: trailing data", line: 1},
		{name: "bad element", body: "[" + ok + "," + `{"worker_id":-1}` + "]", want: "element 1: worker_id: negative number -1", elem: 1},
		{name: "missing comma", body: "[" + ok + " " + ok + "]", want: "element 1: invalid JSON", elem: 1},
		{name: "trailing comma", body: "[" + ok + ",]", want: "element 1: invalid JSON", elem: 1},
		{name: "unterminated", body: "[" + ok, want: "element 1: invalid JSON", elem: 1},
		{name: "after array", body: "[" + ok + "] x", want: "trailing data"},
		{name: "not objects", body: "[1]", want: "element 0: expected an object, found a number", elem: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := DecodeBatch([]byte(tt.body))
			if err == nil {
				t.Fatalf("got %d events, want error %q", len(evs), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want it to contain %q", err, tt.want)
			}
			var le *LineError
			var ee *ElementError
			switch {
			case tt.line > 0 && (!errors.As(err, &le) || le.Line != tt.line):
				t.Fatalf("error %#v, want a *LineError for line %d", err, tt.line)
			case strings.HasPrefix(tt.want, "element") && (!errors.As(err, &ee) || ee.Index != tt.elem):
				t.Fatalf("error %#v, want an *ElementError for element %d", err, tt.elem)
			case tt.want == "no events" && !errors.Is(err, ErrNoEvents):
				t.Fatalf("error %#v, want ErrNoEvents", err)
			}
		})
	}
}

// TestDecodeBatchSizesByEvents checks that the events array is sized by
// what the body can hold, not by its newlines: a 16 MiB body of blank lines
// around one event reserved 16M events (about 1.9 GB) per post.
func TestDecodeBatchSizesByEvents(t *testing.T) {
	const ev = `{"worker_id":1,"event":{"data":"cleared"}}`
	for name, body := range map[string]string{
		"ndjson blank lines": ev + strings.Repeat("\n", 1<<20),
		"array newlines":     "[" + ev + strings.Repeat("\n", 1<<20) + "]",
	} {
		got, err := DecodeBatch([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 1 {
			t.Fatalf("%s: %d events, want 1", name, len(got))
		}
		if limit := len(body)/len(ev) + 1; cap(got) > limit {
			t.Errorf("%s: events reserved for %d, want at most %d for a body of %d bytes", name, cap(got), limit, len(body))
		}
	}
}
