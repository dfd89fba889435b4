package eventjson

import (
	"reflect"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

func TestAppendEvent(t *testing.T) {
	w := engine.WorkerKey{WorkerID: 7, DPRank: 2}
	tests := []struct {
		ev   engine.Event
		want string
	}{
		{engine.Event{Worker: w, EventID: 1, Kind: engine.KindStored, Blocks: []engine.Block{blk(11, 101)}},
			`{"worker_id":7,"event":{"event_id":1,"dp_rank":2,"data":{"stored":{"blocks":[{"block_hash":11,"tokens_hash":101}]}}}}`},
		{engine.Event{Worker: w, EventID: 2, Kind: engine.KindStored, HasParent: true, ParentHash: 11, HasStartPosition: true, Blocks: []engine.Block{blk(12, 102), blk(13, 103)}},
			`{"worker_id":7,"event":{"event_id":2,"dp_rank":2,"data":{"stored":{"parent_hash":11,"start_position":0,"blocks":[{"block_hash":12,"tokens_hash":102},{"block_hash":13,"tokens_hash":103}]}}}}`},
		{engine.Event{Worker: w, EventID: 3, Kind: engine.KindRemoved, BlockHashes: []uint64{12, 13}},
			`{"worker_id":7,"event":{"event_id":3,"dp_rank":2,"data":{"removed":{"block_hashes":[12,13]}}}}`},
		{engine.Event{Worker: w, Kind: engine.KindRemoved},
			`{"worker_id":7,"event":{"event_id":0,"dp_rank":2,"data":{"removed":{"block_hashes":[]}}}}`},
		{engine.Event{Worker: w, EventID: 4, Kind: engine.KindCleared},
			`{"worker_id":7,"event":{"event_id":4,"dp_rank":2,"data":"cleared"}}`},
		{engine.Event{Worker: w, EventID: 5, Kind: engine.KindWorkerRemoved},
			`{"worker_id":7,"event":{"event_id":5,"dp_rank":2,"data":"worker_removed"}}`},
		{engine.Event{Worker: w, Kind: 9},
			`{"worker_id":7,"event":{"event_id":0,"dp_rank":2,"data":"kind(9)"}}`},
	}
	for _, tt := range tests {
		got := string(AppendEvent([]byte("x"), &tt.ev))
		if got != "x"+tt.want {
			t.Errorf("AppendEvent(%+v)\n got %s\nwant x%s", tt.ev, got, tt.want)
		}
		if tt.ev.Kind > engine.KindWorkerRemoved {
			if _, err := DecodeEvent([]byte(tt.want)); err == nil {
				t.Errorf("an event of unknown kind decoded: %s", tt.want)
			}
			continue
		}
		back, err := DecodeEvent([]byte(tt.want))
		if err != nil || !reflect.DeepEqual(back, tt.ev) {
			t.Errorf("DecodeEvent(%s) = %+v, %v; want %+v", tt.want, back, err, tt.ev)
		}
	}
}

func TestAppendEventWithIndex(t *testing.T) {
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 7}, EventID: 4, Kind: engine.KindCleared}
	got := string(AppendEventWithIndex(nil, 42, &ev))
	want := `{"wal_index":42,"worker_id":7,"event":{"event_id":4,"dp_rank":0,"data":"cleared"}}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	back, err := DecodeEvent([]byte(got))
	if err != nil || !reflect.DeepEqual(back, ev) {
		t.Fatalf("DecodeEvent(%s) = %+v, %v; want %+v", got, back, err, ev)
	}
}
