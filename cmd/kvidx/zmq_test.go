package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvidx/kvidx/engine"
)

// kvidx serve --zmq follows a vLLM publisher: a BlockStored batch published
// on loopback becomes a match, its tokens hashed by kvidx.
func TestServeZMQ(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	endpoint := "tcp://" + pub.Addr().String()
	base, done := serveInProcess(t, ctx, "--data-dir", t.TempDir(), "--sync", "none", "--zmq", endpoint+"=7")
	// vLLM's batch: [ts, [events], dp_rank]; BlockStored as an array, tag first.
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	payload, err := msgpack.Marshal([]any{1.5, []any{
		[]any{"BlockStored", []uint64{1001, 1002}, nil, tokens, 4, nil, "GPU", nil},
	}, 0})
	if err != nil {
		t.Fatal(err)
	}
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, 0)
	local := engine.LocalHashes(nil, tokens, 4, "")
	q := fmt.Sprintf(`{"local_hashes":[%d,%d]}`, local[0], local[1])
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// Re-sent until it lands: a SUB that joins late misses messages, and
		// repeats of sequence 0 are dropped as duplicates once applied.
		if err := pub.Send(zmq4.NewMsgFrom([]byte("kv"), seq, payload)); err != nil {
			t.Fatal(err)
		}
		if _, body := post(t, base+"/v1/match", q); strings.Contains(body, `"worker_id":7,"dp_rank":0,"matched_blocks":2`) {
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("the published batch never became a match")
}

// A --zmq value no dial can ever reach is refused at startup, naming the
// flag and what is wrong, instead of being retried for ever.
func TestServeZMQBadEndpoint(t *testing.T) {
	for _, tc := range []struct{ flag, want string }{
		{"tcp://127.0.0.1=1", "want tcp://HOST:PORT"},
		{"tcp://127.0.0.1:notaport=1", `port "notaport"`},
		{"tcp://127.0.0.1:5557=1=2", `port "5557=1"`},
		{"inproc://x=1", "inproc endpoints exist only inside one process"},
		{"tcp://127.0.0.1:5557=1,replay=tcp://127.0.0.1", "replay"},
	} {
		_, _, err := runKvidx(t, "", "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--zmq", tc.flag)
		if err == nil || !strings.Contains(err.Error(), "--zmq") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--zmq %s: got %v; want an error naming --zmq and %q", tc.flag, err, tc.want)
		}
	}
}

// vLLM's config names its publisher's bind address (tcp://*:5557), and a
// --zmq value may name replay= twice: both are refused at startup, where
// they served, dialling kvidx's own host or the last replay endpoint given.
// Bounded by a deadline: a value accepted would serve until it ends.
func TestServeZMQRefusesBindAddressAndRepeatedReplay(t *testing.T) {
	for _, tc := range []struct{ flag, want string }{
		{"tcp://*:5557=1", "* is a bind address"},
		{"tcp://127.0.0.1:5557=1,replay=tcp://*:5558", "* is a bind address"},
		{"tcp://127.0.0.1:5557=1,replay=tcp://127.0.0.1:5558,replay=tcp://127.0.0.1:5559", "replay given twice"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cmd := newRootCmd()
		cmd.SetArgs([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--zmq", tc.flag})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.ExecuteContext(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--zmq") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--zmq %s: got %v; want an error naming --zmq and %q", tc.flag, err, tc.want)
		}
	}
}
