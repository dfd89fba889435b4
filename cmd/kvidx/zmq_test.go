package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

// zmqPublisher is a vLLM engine's KV-event publisher on loopback.
func zmqPublisher(t *testing.T, ctx context.Context) (zmq4.Socket, string) {
	t.Helper()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
	t.Cleanup(func() { pub.Close() })
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return pub, "tcp://" + pub.Addr().String()
}

// matchQuery is a /v1/match body for the blocks (of 4) of tokens.
func matchQuery(tokens []uint32) string {
	local := engine.LocalHashes(nil, tokens, 4, "")
	return fmt.Sprintf(`{"local_hashes":[%d]}`, local[0])
}

// publishUntilMatched publishes batch seq, storing one block of tokens on
// DP rank 0, until a match names worker id.
func publishUntilMatched(t *testing.T, pub zmq4.Socket, base string, seq uint64, hash uint64, tokens []uint32, id int) {
	t.Helper()
	payload, err := msgpack.Marshal([]any{float64(1000 + seq), []any{
		[]any{"BlockStored", []uint64{hash}, nil, tokens, 4, nil, "GPU", nil},
	}, 0})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"worker_id":%d,"dp_rank":0,"matched_blocks":1`, id)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := pub.Send(zmq4.NewMsgFrom([]byte("kv"), binary.BigEndian.AppendUint64(nil, seq), payload)); err != nil {
			t.Fatal(err)
		}
		if _, body := post(t, base+"/v1/match", matchQuery(tokens)); strings.Contains(body, want) {
			return
		}
	}
	t.Fatalf("batch %d never became a match of worker %d", seq, id)
}

// Two --zmq endpoints swap their worker ids at a restart of kvidx: each id
// ends with exactly its new engine's blocks, none of the engine it was
// given before (they stayed matched for ever, stale credit), also when
// kvidx stops after that start before any batch arrived and starts again
// (from the WAL alone: no final snapshot).
func TestServeZMQWorkerIDSwap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		starts int // with the ids swapped
	}{
		{"restarted once", 1},
		{"stopped before the first batch", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pubA, epA, pubB, epB, flags := twoEnginesFed(t, ctx)
			a0, b0, a1, b1 := engineATokens, engineBTokens, []uint32{9, 10, 11, 12}, []uint32{13, 14, 15, 16}

			swapped := append(flags, "--zmq", epA+"=8", "--zmq", epB+"=7")
			for range tc.starts - 1 {
				sctx, stop := context.WithCancel(ctx)
				_, done := serveInProcess(t, sctx, swapped...)
				stop()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			base, done := serveInProcess(t, ctx, swapped...)
			publishUntilMatched(t, pubA, base, 1, 1002, a1, 8)
			publishUntilMatched(t, pubB, base, 1, 2002, b1, 7)
			for _, tokens := range [][]uint32{a0, b0} {
				if _, body := post(t, base+"/v1/match", matchQuery(tokens)); strings.Contains(body, "worker_id") {
					t.Errorf("the engines' blocks from before the swap are still matched: %s", body)
				}
			}
			resp, err := http.Get(base + "/v1/workers")
			if err != nil {
				t.Fatal(err)
			}
			workers, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if n := strings.Count(string(workers), `"worker_id"`); n != 2 {
				t.Errorf("/v1/workers lists %d worker keys, want 2: %s", n, workers)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A --zmq endpoint dropped from the flags at a restart of kvidx (with the
// other endpoint kept, or none left) no longer keeps its engine's blocks
// matched for good (stale credit: nothing follows that engine any more);
// a kept endpoint's stay.
func TestServeZMQEndpointRemoved(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keepB bool
	}{
		{"other endpoint kept", true},
		{"no endpoint left", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, _, _, epB, flags := twoEnginesFed(t, ctx)
			a0, b0 := engineATokens, engineBTokens

			if tc.keepB {
				flags = append(flags, "--zmq", epB+"=8")
			}
			base, done := serveInProcess(t, ctx, flags...)
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, body := post(t, base+"/v1/match", matchQuery(a0))
				if !strings.Contains(body, "worker_id") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the removed endpoint's blocks are still matched: %s", body)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if _, body := post(t, base+"/v1/match", matchQuery(b0)); strings.Contains(body, `"worker_id":8`) != tc.keepB {
				t.Errorf("endpoint B kept: %v, but /v1/match of its blocks answers %s", tc.keepB, body)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Until a start's clears of what ZMQ endpoints fed worker ids they feed no
// more have landed, event posts get 503 with Retry-After and /readyz is not
// ready, with endpoints configured or none. Worker 7 here is one such: an
// event posted for it before the clears was acknowledged and then cleared
// with what engine A fed it, and with no endpoint left /readyz answered
// ready before A's and B's blocks, about to be cleared, were. The clears
// are held open with serve's beforeClearsKey hook.
func TestServeZMQClearsBeforeIngest(t *testing.T) {
	for _, tc := range []struct {
		name string
		zmq  func(epA, epB string) []string
	}{
		{"worker ids swapped", func(epA, epB string) []string { return []string{"--zmq", epA + "=8", "--zmq", epB + "=7"} }},
		{"no endpoint left", func(string, string) []string { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, epA, _, epB, flags := twoEnginesFed(t, ctx)
			held, release := make(chan struct{}), make(chan struct{})
			hold := func(ctx context.Context) {
				close(held)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			base, done := serveListening(t, context.WithValue(ctx, beforeClearsKey{}, hold), append(flags, tc.zmq(epA, epB)...)...)
			select {
			case <-held:
			case <-time.After(20 * time.Second):
				t.Fatal("serve never began its clears")
			}
			posted := storeChain(7, 1, 101)
			resp, err := http.Post(base+"/v1/events", "application/x-ndjson", strings.NewReader(posted))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "clearing what ZMQ endpoints fed") {
				t.Errorf("event post during the clears: %d, Retry-After %q, %s; want 503 to retry, saying why", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			if resp, err = http.Get(base + "/readyz"); err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"status":"starting"`) {
				t.Errorf("readyz during the clears: %d %s; want 503 starting", resp.StatusCode, body)
			}
			close(release)
			waitReady(t, base)
			for _, tokens := range [][]uint32{engineATokens, engineBTokens} {
				if _, body := post(t, base+"/v1/match", matchQuery(tokens)); strings.Contains(body, "worker_id") {
					t.Errorf("ready while blocks the clears take are still matched: %s", body)
				}
			}
			if code, body := post(t, base+"/v1/events", posted); code != 200 {
				t.Fatalf("event post once ready: %d %s", code, body)
			}
			if _, body := post(t, base+"/v1/match", `{"local_hashes":[101]}`); !strings.Contains(body, `"worker_id":7`) {
				t.Errorf("the event posted once ready is not matched: %s", body)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A SIGTERM or SIGINT while a start's ZMQ clears run is a clean stop that
// takes the final snapshot (the store was set), and the next start clears
// what they would have.
func TestServeStopDuringZMQClears(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, _, _, flags := twoEnginesFed(t, ctx)
	dir := flags[slices.Index(flags, "--data-dir")+1]
	flags = append(flags, "--final-snapshot=true")
	held := make(chan struct{})
	hold := func(ctx context.Context) {
		close(held)
		<-ctx.Done()
	}
	sctx, stop := context.WithCancel(context.WithValue(ctx, beforeClearsKey{}, hold))
	_, done := serveListening(t, sctx, flags...)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("serve never began its clears")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("stopped during the clears: %v, want a clean stop", err)
	}
	if snaps, err := os.ReadDir(filepath.Join(dir, "snapshots")); err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots after the stop: %v, %v; want the final one", snaps, err)
	}
	base, done := serveInProcess(t, ctx, flags...)
	for _, tokens := range [][]uint32{engineATokens, engineBTokens} {
		if _, body := post(t, base+"/v1/match", matchQuery(tokens)); strings.Contains(body, "worker_id") {
			t.Errorf("the removed endpoints' blocks are matched after the next start: %s", body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The blocks twoEnginesFed has its engines A and B store.
var (
	engineATokens = []uint32{1, 2, 3, 4}
	engineBTokens = []uint32{5, 6, 7, 8}
)

// twoEnginesFed starts two ZMQ engines, A and B, and a kvidx serve on a new
// data directory following A as worker 7 and B as worker 8; each engine's
// batch 0 stores one block (engineATokens, engineBTokens), matched before
// the serve stops. It returns the engines and the serve flags without
// --zmq, for the next start on that directory.
func twoEnginesFed(t *testing.T, ctx context.Context) (pubA zmq4.Socket, epA string, pubB zmq4.Socket, epB string, flags []string) {
	t.Helper()
	pubA, epA = zmqPublisher(t, ctx)
	pubB, epB = zmqPublisher(t, ctx)
	flags = []string{"--data-dir", t.TempDir(), "--sync", "none", "--final-snapshot=false"}
	sctx, stop := context.WithCancel(ctx)
	base, done := serveInProcess(t, sctx, append(slices.Clone(flags), "--zmq", epA+"=7", "--zmq", epB+"=8")...)
	publishUntilMatched(t, pubA, base, 0, 1001, engineATokens, 7)
	publishUntilMatched(t, pubB, base, 0, 2001, engineBTokens, 8)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return pubA, epA, pubB, epB, flags
}
