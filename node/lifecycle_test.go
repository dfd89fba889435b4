package node

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kvidx "github.com/kvidx/kvidx"
	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/logbuf"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
	"github.com/kvidx/kvidx/workload"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// waitFor polls cond for up to 30 s (a bound for a loaded CI machine under
// -race, not an expected time).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSnapshotEveryEvents(t *testing.T) {
	var logs logbuf.Buffer
	e := serveWithSnapshotLoop(t, Config{SnapshotEveryEvents: 3, SnapshotRetry: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	srv, st := e.srv, e.store

	e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1)+"\n"+stored(0, 2, "1", 2)).want(t, 200)
	time.Sleep(30 * time.Millisecond)
	if _, snaps := st.counts(); snaps != 0 {
		t.Fatalf("snapshot after 2 of 3 events")
	}
	// A failing snapshot is counted and retried; ingest goes on.
	st.snapErr.Store(errBox{err: errors.New("disk full")})
	e.do(t, "POST", "/v1/events", stored(0, 3, "2", 3)).want(t, 200)
	waitFor(t, "a failed snapshot", func() bool { return testutil.ToFloat64(srv.metrics.snapFailures) >= 2 })
	e.do(t, "POST", "/v1/events", stored(0, 4, "3", 4)).want(t, 200)
	st.snapErr.Store(errBox{})
	// The store counts the snapshot before the loop records and logs it:
	// wait for the log line, the last of these.
	waitFor(t, "a snapshot published", func() bool { return strings.Contains(logs.String(), `msg="snapshot published"`) })
	if _, n := st.counts(); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
	if idx, _ := srv.snaps.last(); idx != 3 {
		t.Fatalf("snapshot index %d, want 3", idx)
	}
	time.Sleep(50 * time.Millisecond)
	if _, n := st.counts(); n != 1 {
		t.Fatalf("%d snapshots, want 1 (pending should be reset)", n)
	}
	// The log names what triggered it (it said "periodic").
	if out := logs.String(); !strings.Contains(out, `msg="snapshot published" trigger=events`) {
		t.Fatalf("log:\n%s\nwant the snapshot's trigger named events", out)
	}
}

// The events a restart replayed from the WAL are past the snapshot as much
// as new ones: they count towards SnapshotEveryEvents (they did not, and a
// node restarted with many of them waited for that many more).
func TestReplayedEventsCountTowardsSnapshot(t *testing.T) {
	for _, tc := range []struct {
		replayed uint64
		want     int
	}{{9, 0}, {10, 1}} {
		t.Run(fmt.Sprint(tc.replayed), func(t *testing.T) {
			srv := New(Config{SnapshotEveryEvents: 10, Logger: quietLogger()})
			st := newFakeStore()
			ev := []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}}
			if _, _, err := st.Append(context.Background(), ev, nil); err != nil {
				t.Fatal(err)
			}
			srv.SetStore(replayedStore{st, tc.replayed})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go srv.snaps.loop(ctx)
			if tc.want > 0 {
				waitFor(t, "a snapshot for the replayed events", func() bool { _, n := st.counts(); return n == tc.want })
			}
			time.Sleep(50 * time.Millisecond)
			if _, n := st.counts(); n != tc.want {
				t.Fatalf("%d snapshots after %d replayed events, want %d", n, tc.replayed, tc.want)
			}
		})
	}
}

// replayedStore is a store that recovery opened, replaying events.
type replayedStore struct {
	*fakeStore
	replayed uint64
}

func (r replayedStore) Report() recovery.Report { return recovery.Report{ReplayedEvents: r.replayed} }

// TestSourceStore: appends through SourceStore (what serve gives its ZMQ and
// NATS sources) count towards SnapshotEveryEvents, and a fenced WAL fences
// the server, as HTTP ingest's appends do.
func TestSourceStore(t *testing.T) {
	srv := New(Config{SnapshotEveryEvents: 10, Logger: quietLogger()})
	st := newFakeStore()
	srv.SetStore(st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.snaps.loop(ctx)
	src := srv.SourceStore(st)
	for i := range 10 {
		ev := []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, EventID: uint64(i + 1), Kind: engine.KindCleared}}
		if _, _, err := src.Append(ctx, ev, []wal.Position{{Source: "zmq:x", Seq: uint64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a snapshot after 10 source events", func() bool { _, n := st.counts(); return n == 1 })
	if idx, pos := src.Applied(); idx != 10 || len(pos) != 0 {
		t.Fatalf("Applied() = %d, %v", idx, pos)
	}
	st.failFence.Store(true)
	ev := []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}}
	if _, _, err := src.Append(ctx, ev, nil); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("Append on a fenced WAL: %v", err)
	}
	if p := srv.state.Load().phase; p != Fenced {
		t.Fatalf("phase %v after a source hit a fenced WAL, want Fenced", p)
	}
}

func TestSnapshotInterval(t *testing.T) {
	srv, st := newServerOnFake(Config{SnapshotInterval: 30 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.snaps.loop(ctx)
	time.Sleep(100 * time.Millisecond)
	if _, n := st.counts(); n != 0 {
		t.Fatal("snapshot of an unchanged index")
	}
	e := &testEnv{srv: srv, store: st, url: serveFront(t, srv)}
	e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1)).want(t, 200)
	waitFor(t, "an interval snapshot", func() bool { _, n := st.counts(); return n == 1 })
	time.Sleep(100 * time.Millisecond)
	if _, n := st.counts(); n != 1 {
		t.Fatalf("%d snapshots of an index that changed once", n)
	}
}

func TestRunShutdown(t *testing.T) {
	for _, final := range []bool{true, false} {
		t.Run(fmt.Sprint("final=", final), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.FinalSnapshot = final
			srv, st := newServerOnFake(cfg)
			url, stop := startRun(t, srv)
			resp, err := http.Post(url+"/v1/events", "application/x-ndjson", bytes.NewBufferString(stored(0, 1, "null", 1)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if _, n := st.counts(); (n == 1) != final {
				t.Fatalf("final=%v: %d snapshots", final, n)
			}
			if _, err := http.Get(url + "/healthz"); err == nil {
				t.Fatal("still serving after shutdown")
			}
		})
	}
}

func TestConcurrentClients(t *testing.T) {
	e := newEnv(t, DefaultConfig())
	const clients, perClient = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			client := &http.Client{}
			w := uint64(c)
			for i := range perClient {
				h := uint64(i + 1)
				parent := "null"
				if i > 0 {
					parent = fmt.Sprint(1000*w + h - 1)
				}
				resp, err := client.Post(e.url+"/v1/events", "", bytes.NewBufferString(stored(w, h, parent, h)))
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("events status %d", resp.StatusCode)
					return
				}
				resp, err = client.Post(e.url+"/v1/match", "", bytes.NewBufferString(`{"local_hashes":[1,2,3]}`))
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("match status %d", resp.StatusCode)
					return
				}
				if i%10 == 0 {
					for _, p := range []string{"/v1/stats", "/v1/workers", "/metrics"} {
						resp, err := client.Get(e.url + p)
						if err != nil {
							errs <- err
							return
						}
						resp.Body.Close()
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := e.store.ix.Stats()
	if s.WorkerKeys != clients || s.HolderBlocks != clients*perClient || s.Counters.ParentNotFound != 0 {
		t.Fatalf("stats %+v", s)
	}
	var ma matchAnswer
	e.do(t, "POST", "/v1/match", `{"local_hashes":[1,2,3]}`).want(t, 200).decode(t, &ma)
	if len(ma.Scores) != clients || ma.Scores[0].MatchedBlocks != 3 {
		t.Fatalf("match %+v", ma)
	}
}

func embeddedTrace(t testing.TB) *workload.Trace {
	zr, err := gzip.NewReader(bytes.NewReader(kvidx.MooncakeTraceGz))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := workload.ReadTrace(zr)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestLoadGen(t *testing.T) {
	e := newEnv(t, DefaultConfig())
	tr := embeddedTrace(t)
	tr.Records = tr.Records[:300]
	cfg := workload.Config{Workers: 8, Capacity: 256, Duplicate: 1}
	rep, err := LoadGen(context.Background(), e.url, tr, cfg, LoadOptions{Concurrency: 4, Posters: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if !rep.Exhausted || rep.Requests == 0 || rep.Rejected != 0 || rep.Matches != rep.Requests {
		t.Fatalf("report %+v", rep)
	}
	// The server ends in the workload's final state.
	ix := e.store.ix
	want := workloadFinal(t, tr, cfg)
	if got := ix.Stats(); got.Entries != want.Entries || got.HolderBlocks != want.HolderBlocks {
		t.Fatalf("server %+v, workload %+v", got, want)
	}
	if uint64(rep.Events) != ix.Stats().Counters.EventsStored+ix.Stats().Counters.EventsRemoved {
		t.Fatalf("events %d vs counters %+v", rep.Events, ix.Stats().Counters)
	}
}

func workloadFinal(t *testing.T, tr *workload.Trace, cfg workload.Config) engine.Stats {
	ix := newFakeStore().ix
	if err := workload.Run(context.Background(), ix, tr, cfg, nil); err != nil {
		t.Fatal(err)
	}
	return ix.Stats()
}

// A snapshot cut short by shutdown (its context ended) is not a failure.
func TestSnapshotAbandonedAtShutdownNotFailure(t *testing.T) {
	srv := New(Config{Logger: quietLogger()})
	st := newFakeStore()
	srv.SetStore(st)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st.snapErr.Store(errBox{err: fmt.Errorf("snapshot write: %w", ctx.Err())})
	if _, _, err := srv.snaps.take(ctx, "periodic"); err == nil {
		t.Fatal("want the abandoned snapshot's error")
	}
	if n := testutil.ToFloat64(srv.metrics.snapFailures); n != 0 {
		t.Fatalf("%v snapshot failures counted for one abandoned at shutdown", n)
	}
	st.snapErr.Store(errBox{err: errors.New("disk full")})
	srv.snaps.take(context.Background(), "periodic")
	if n := testutil.ToFloat64(srv.metrics.snapFailures); n != 1 {
		t.Fatalf("%v snapshot failures counted, want 1", n)
	}
}

// failingListener accepts connections until fail is closed, then fails.
type failingListener struct {
	net.Listener
	fail chan struct{}
}

func (l *failingListener) Accept() (net.Conn, error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() { c, err := l.Listener.Accept(); ch <- accepted{c, err} }()
	select {
	case a := <-ch:
		return a.c, a.err
	case <-l.fail:
		return nil, errors.New("listener broke")
	}
}

// When the listener fails, Run drains the connections it had accepted: a
// kept-alive one is not served after Run returns (the caller then closes
// the store).
func TestRunListenerFails(t *testing.T) {
	srv := New(Config{Logger: quietLogger(), ShutdownTimeout: time.Second})
	st := newFakeStore()
	srv.SetStore(st)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	ln := &failingListener{Listener: inner, fail: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background(), ln) }()
	conn, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	get := func() (*http.Response, error) {
		if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return nil, err
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		return http.ReadResponse(br, nil)
	}
	resp, err := get()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	close(ln.fail)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after its listener failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its listener failed")
	}
	if resp, err := get(); err == nil && resp.StatusCode == 200 {
		t.Fatal("a kept-alive connection was served after Run returned")
	}
}

// exhaustedListener fails its first fails Accepts as a listener of a
// process out of file descriptors does, then accepts.
type exhaustedListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *exhaustedListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// An Accept that fails for want of file descriptors (a client opening
// connections until the process has none left) is retried: fasthttp took
// it as permanent, and Run, then kvidx serve, ended.
func TestRunSurvivesAcceptErrors(t *testing.T) {
	srv := New(Config{Logger: quietLogger(), ShutdownTimeout: time.Second})
	srv.SetStore(newFakeStore())
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	ln := &exhaustedListener{Listener: inner}
	ln.fails.Store(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + inner.Addr().String() + "/healthz")
	if err != nil {
		select {
		case runErr := <-done:
			t.Fatalf("Run ended on a retryable accept error: %v (request: %v)", runErr, err)
		default:
			t.Fatal(err)
		}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestSourcesStopBeforeFinalSnapshot: a source started with GoSource keeps
// appending until the shutdown ends its context, and Run waits for it
// before the final snapshot, which therefore covers its last append.
func TestSourcesStopBeforeFinalSnapshot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FinalSnapshot = true
	srv, st := newServerOnFake(cfg)
	_, stop := startRun(t, srv)
	var stopped atomic.Bool
	srv.GoSource(func(ctx context.Context) error {
		defer stopped.Store(true)
		store := srv.SourceStore(st)
		for i := uint64(1); ctx.Err() == nil; i++ {
			ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: i, TokensHash: i}}}
			if _, _, err := store.Append(ctx, []engine.Event{ev}, nil); err != nil {
				return err
			}
			time.Sleep(time.Millisecond) // the store's lock is not a queue: let the snapshot in
		}
		return nil
	})
	waitFor(t, "the source's first appends", func() bool { a, _ := st.counts(); return a >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !stopped.Load() {
		t.Fatal("Run returned before the source's loop")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.snapIndex != st.index {
		t.Fatalf("final snapshot at %d, last append %d: a clean restart would replay", st.snapIndex, st.index)
	}
	srv.GoSource(func(context.Context) error {
		t.Error("a source started after the shutdown ran")
		return nil
	})
}

// TestSetStorePreparing: while the appends that must come first (serve's
// clears of what ZMQ endpoints fed worker ids they feed no more) have not
// landed, the server answers queries but refuses event posts and deletes
// with a 503 to retry, and /readyz is not ready: an event posted then for
// such a worker id was acknowledged and then cleared with it. Once they
// have landed the server is ready, then runs, and events are taken.
func TestSetStorePreparing(t *testing.T) {
	srv := New(Config{Logger: quietLogger()})
	st := newFakeStore()
	fed := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 1001, TokensHash: 1}}}
	if _, _, err := st.Append(context.Background(), []engine.Event{fed}, nil); err != nil {
		t.Fatal(err)
	}
	url, stop := startRun(t, srv)
	e := &testEnv{srv: srv, store: st, url: url}
	release := make(chan struct{})
	var then atomic.Bool
	srv.SetStorePreparing(st, "clearing old worker ids", func(ctx context.Context) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		cleared := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}
		_, _, err := srv.SourceStore(st).Append(ctx, []engine.Event{cleared}, nil)
		return err
	}, func() { then.Store(true) })

	r := e.do(t, "POST", "/v1/events", stored(1, 1, "null", 7)).want(t, 503)
	if r.header.Get("Retry-After") != "1" || !bytes.Contains(r.body, []byte("not ready: clearing old worker ids")) {
		t.Errorf("event post while preparing: Retry-After %q, %s; want 1 and the reason", r.header.Get("Retry-After"), r.body)
	}
	e.do(t, "DELETE", "/v1/workers/1", "").want(t, 503)
	if r := e.do(t, "GET", "/readyz", "").want(t, 503); !bytes.Contains(r.body, []byte(`"status":"starting"`)) || !bytes.Contains(r.body, []byte("clearing old worker ids")) {
		t.Errorf("readyz while preparing: %s", r.body)
	}
	e.do(t, "POST", "/v1/match", `{"local_hashes":[1]}`).want(t, 200)
	if appends, _ := st.counts(); appends != 1 || then.Load() {
		t.Fatalf("while preparing: %d appends, then ran %v; want only the one before, and not", appends, then.Load())
	}

	close(release)
	waitFor(t, "ready, and then run", func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 && then.Load()
	})
	e.do(t, "POST", "/v1/events", stored(1, 2, "null", 7)).want(t, 200)
	var m matchAnswer
	e.do(t, "POST", "/v1/match", `{"local_hashes":[7]}`).want(t, 200).decode(t, &m)
	if len(m.Scores) != 1 || m.Scores[0].WorkerID != 1 || m.Scores[0].MatchedBlocks != 1 {
		t.Errorf("match of the block posted once ready: %+v", m)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A shutdown while the store is being prepared ends prepare's context and
// is clean: then does not run, and the final snapshot, taken once prepare
// has returned, covers what it appended (the next start replays nothing).
func TestShutdownWhilePreparing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FinalSnapshot = true
	cfg.Logger = quietLogger()
	srv := New(cfg)
	st := newFakeStore()
	_, stop := startRun(t, srv)
	var returned, then atomic.Bool
	srv.SetStorePreparing(st, "clearing old worker ids", func(ctx context.Context) error {
		defer returned.Store(true)
		cleared := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}
		if _, _, err := srv.SourceStore(st).Append(ctx, []engine.Event{cleared}, nil); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}, func() { then.Store(true) })
	waitFor(t, "prepare's append", func() bool { a, _ := st.counts(); return a == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v, want a clean shutdown", err)
	}
	if !returned.Load() || then.Load() {
		t.Fatalf("after the shutdown: prepare returned %v, then ran %v; want true, false", returned.Load(), then.Load())
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.snaps != 1 || st.snapIndex != st.index {
		t.Fatalf("%d snapshots, the last at %d, last append %d: want the final one covering it", st.snaps, st.snapIndex, st.index)
	}
}

// A prepare that fails for another reason than the shutdown leaves the
// server starting, ingest refused (ingest before its appends landed is what
// SetStorePreparing prevents), and then not run; but it says so: the error
// is logged, and /readyz and the refused post name it. It was dropped (a
// source loop's error is), and the server said "clearing old worker ids"
// for ever.
func TestSetStorePreparingFails(t *testing.T) {
	var logs logbuf.Buffer
	srv := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	st := newFakeStore()
	url, stop := startRun(t, srv)
	e := &testEnv{srv: srv, store: st, url: url}
	var returned, then atomic.Bool
	srv.SetStorePreparing(st, "clearing old worker ids", func(ctx context.Context) error {
		defer returned.Store(true)
		return errors.New("the clears' append was refused")
	}, func() { then.Store(true) })
	waitFor(t, "prepare to return", returned.Load)
	const want = "clearing old worker ids failed (restart to retry): the clears' append was refused"
	waitFor(t, "the failure logged", func() bool {
		return strings.Contains(logs.String(), "level=ERROR") && strings.Contains(logs.String(), "the clears' append was refused")
	})
	if r := e.do(t, "GET", "/readyz", "").want(t, 503); !bytes.Contains(r.body, []byte(`"status":"starting"`)) || !bytes.Contains(r.body, []byte(want)) {
		t.Errorf("readyz after prepare failed: %s; want starting, with %q", r.body, want)
	}
	if r := e.do(t, "POST", "/v1/events", stored(1, 1, "null", 7)).want(t, 503); !bytes.Contains(r.body, []byte(want)) {
		t.Errorf("event post after prepare failed: %s; want %q", r.body, want)
	}
	if then.Load() {
		t.Error("then ran after prepare failed")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// While the store pauses appends for free space, a prepare's appends (the
// start's ZMQ clears) are refused and retried: /readyz and refused posts
// say "starting: clearing ..." no more but that ingest is paused for free
// space (an operator saw no reason the start did not finish), and
// "starting" again once the pause ends before the prepare's appends land.
// A prepare that failed still says so while the store is paused.
func TestSetStorePreparingPaused(t *testing.T) {
	const reason = "clearing old worker ids"
	readyz := func(t *testing.T, e *testEnv, status, msg string) {
		t.Helper()
		var ready struct{ Status, Error string }
		e.do(t, "GET", "/readyz", "").want(t, 503).decode(t, &ready)
		if ready.Status != status || !strings.Contains(ready.Error, msg) {
			t.Errorf("readyz: %+v, want status %q and %q", ready, status, msg)
		}
		r := e.do(t, "POST", "/v1/events", stored(1, 1, "null", 7)).want(t, 503)
		if r.header.Get("Retry-After") != "1" || !bytes.Contains(r.body, []byte("not ready: "+msg)) {
			t.Errorf("event post: Retry-After %q, %s; want 1 and %q", r.header.Get("Retry-After"), r.body, msg)
		}
	}
	const paused = "ingest paused: 1.0 MiB free on the WAL's filesystem, below the 9.0 MiB kept"

	t.Run("preparing", func(t *testing.T) {
		srv := New(Config{Logger: quietLogger()})
		st := newFakeStore()
		st.lowSpace.Store(true)
		url, stop := startRun(t, srv)
		e := &testEnv{srv: srv, store: st, url: url}
		var refused atomic.Int64
		retry := make(chan struct{})
		var then atomic.Bool
		srv.SetStorePreparing(st, reason, func(ctx context.Context) error {
			cleared := []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}}
			for {
				_, _, err := srv.SourceStore(st).Append(ctx, cleared, nil)
				if err == nil || !errors.Is(err, recovery.ErrLowSpace) {
					return err
				}
				refused.Add(1)
				select {
				case <-retry:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}, func() { then.Store(true) })
		waitFor(t, "the prepare's append refused", func() bool { return refused.Load() == 1 })
		readyz(t, e, "ingest_paused", paused)

		st.lowSpace.Store(false)
		readyz(t, e, "starting", reason)

		retry <- struct{}{}
		waitFor(t, "ready, and then run", then.Load)
		e.do(t, "GET", "/readyz", "").want(t, 200)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("prepare failed", func(t *testing.T) {
		srv := New(Config{Logger: quietLogger()})
		st := newFakeStore()
		st.lowSpace.Store(true)
		url, stop := startRun(t, srv)
		e := &testEnv{srv: srv, store: st, url: url}
		var returned atomic.Bool
		srv.SetStorePreparing(st, reason, func(ctx context.Context) error {
			defer returned.Store(true)
			return errors.New("the clears' append was refused")
		}, nil)
		waitFor(t, "prepare to return", returned.Load)
		waitFor(t, "the failure in the reason", func() bool {
			_, why := srv.Status()
			return strings.Contains(why, "failed")
		})
		readyz(t, e, "starting", reason+" failed (restart to retry)")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// gatedStore is a fakeStore whose appends wait until gate is closed.
type gatedStore struct {
	*fakeStore
	gate chan struct{}
}

func (g *gatedStore) Append(ctx context.Context, events []engine.Event, ps []wal.Position) (uint64, []error, error) {
	<-g.gate
	return g.fakeStore.Append(ctx, events, ps)
}

// A shutdown whose drain times out only on a request that never arrived
// whole (a stalled client) is clean: nothing of it can have been
// acknowledged (it made kvidx serve exit non-zero after the full drain
// timeout). One that times out with a batch still in the store's Append is
// a failure. Found by review.
func TestShutdownDrainTimeout(t *testing.T) {
	for _, stalled := range []bool{true, false} {
		t.Run(fmt.Sprintf("stalled client %v", stalled), func(t *testing.T) {
			srv := New(Config{Logger: quietLogger(), ShutdownTimeout: 300 * time.Millisecond})
			st := &gatedStore{fakeStore: newFakeStore(), gate: make(chan struct{})}
			defer close(st.gate)
			srv.SetStore(st)
			url, stop := startRun(t, srv)
			conn, err := net.Dial("tcp", url[len("http://"):])
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := stored(0, 1, "null", 1)
			if stalled {
				fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body)+100, body)
				time.Sleep(100 * time.Millisecond)
			} else {
				fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				waitFor(t, "the batch to reach the store", func() bool { return srv.appending.Load() == 1 })
			}
			err = stop()
			switch {
			case stalled && err != nil:
				t.Fatalf("shutdown with a stalled client: %v, want a clean one", err)
			case !stalled && (err == nil || !strings.Contains(err.Error(), "1 event batches still in the WAL")):
				t.Fatalf("shutdown with a batch in the store: %v, want a drain failure naming it", err)
			}
		})
	}
}

// A batch that reaches appendEvents once the drain has ended (decoded while
// it timed out) is refused, not appended after Run called the shutdown
// clean; one counted before is what the drain reports. Found by review.
func TestAppendAfterDrainRefused(t *testing.T) {
	srv, st := newServerOnFake(DefaultConfig())
	srv.draining.Store(true)
	ev := []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 1, TokensHash: 1}}}}
	_, _, rep := srv.appendEvents(st, ev)
	if rep == nil || rep.code != http.StatusServiceUnavailable {
		t.Fatalf("append while draining: %+v, want a 503", rep)
	}
	if a, _ := st.counts(); a != 0 || srv.appending.Load() != 0 {
		t.Fatalf("%d appends, %d counted, want none", a, srv.appending.Load())
	}
}

// serveWithSnapshotLoop serves a server for cfg on a fake store through
// the fast front end, with its snapshot loop running until the test ends.
func serveWithSnapshotLoop(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	srv, st := newServerOnFake(cfg)
	e := &testEnv{srv: srv, store: st, url: serveFront(t, srv)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go srv.snaps.loop(ctx)
	return e
}

// While the store pauses appends for lack of free space, event posts get
// 503 with Retry-After (nothing taken), the loop takes a snapshot (once:
// its retention is what may free WAL segments), sources' appends do the
// same, and stats and metrics report the pause; posts are taken again as
// soon as the store resumes.
func TestIngestPausesWhileSpaceIsLow(t *testing.T) {
	e := serveWithSnapshotLoop(t, Config{SnapshotEveryEvents: 1000, SnapshotRetry: 20 * time.Millisecond})
	srv, st := e.srv, e.store

	e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1)).want(t, 200)
	st.lowSpace.Store(true)
	r := e.do(t, "POST", "/v1/events", stored(0, 2, "1", 2)).want(t, 503)
	if r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "ingest paused") || !strings.Contains(string(r.body), "MiB free") {
		t.Fatalf("paused post: Retry-After %q, body %s", r.header.Get("Retry-After"), r.body)
	}
	waitFor(t, "a snapshot while appends pause", func() bool { _, n := st.counts(); return n == 1 })
	// Nothing changed since: no second snapshot, however often posts come.
	for range 3 {
		e.do(t, "POST", "/v1/events", stored(0, 2, "1", 2)).want(t, 503)
	}
	src := srv.SourceStore(st)
	ev := []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}}
	if _, _, err := src.Append(t.Context(), ev, nil); !errors.Is(err, wal.ErrOverloaded) {
		t.Fatalf("source append while paused: %v, want wal.ErrOverloaded", err)
	}
	time.Sleep(50 * time.Millisecond)
	if appends, n := st.counts(); n != 1 || appends != 1 {
		t.Fatalf("%d snapshots and %d appends while paused, want 1 and 1", n, appends)
	}
	var stats statsJSON
	e.do(t, "GET", "/v1/stats", "").want(t, 200).decode(t, &stats)
	if !stats.IngestPaused || stats.DiskFreeBytes != 1<<20 || stats.DiskFloorBytes != 9<<20 {
		t.Fatalf("stats while paused: paused %v, free %d, floor %d", stats.IngestPaused, stats.DiskFreeBytes, stats.DiskFloorBytes)
	}
	var ready struct{ Status, Error string }
	e.do(t, "GET", "/readyz", "").want(t, 503).decode(t, &ready)
	if ready.Status != "ingest_paused" || !strings.Contains(ready.Error, "MiB free") {
		t.Fatalf("readyz while paused: %+v", ready)
	}
	metrics := string(e.do(t, "GET", "/metrics", "").body)
	for _, m := range []string{"kvidx_ingest_paused_low_space 1", "kvidx_disk_free_bytes 1.048576e+06", "kvidx_disk_floor_bytes 9.437184e+06"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %q", m)
		}
	}

	st.lowSpace.Store(false)
	e.do(t, "GET", "/readyz", "").want(t, 200)
	e.do(t, "POST", "/v1/events", stored(0, 2, "1", 2)).want(t, 200)
	if !strings.Contains(string(e.do(t, "GET", "/metrics", "").body), "kvidx_ingest_paused_low_space 0") {
		t.Error("metrics still report the pause")
	}
}

// A shutdown whose final snapshot finds no room (a nearly full disk) is
// still clean: everything acknowledged is in the WAL, which the next start
// replays (found by drilling: the node exited 1 on SIGTERM while paused).
// Other snapshot failures still fail it.
func TestFinalSnapshotWithoutRoomIsClean(t *testing.T) {
	for _, c := range []struct {
		err   error
		clean bool
	}{
		{fmt.Errorf("data dir d: a snapshot was not written: %w", recovery.ErrNoSpace), true},
		{errors.New("snapshot write: input/output error"), false},
	} {
		srv, st := newServerOnFake(Config{FinalSnapshot: true})
		url, stop := startRun(t, srv)
		e := &testEnv{srv: srv, store: st, url: url}
		e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1)).want(t, 200)
		st.snapErr.Store(errBox{err: c.err})
		if err := stop(); (err == nil) != c.clean {
			t.Errorf("final snapshot failing with %q: Run returned %v, want clean %v", c.err, err, c.clean)
		}
	}
}

// A pause for free space that no refused append reveals (the disk filled
// while the node was idle, or it started on a nearly full disk after a
// replay, and /readyz says ingest_paused, so a readiness-gated client sends
// nothing) still gets the snapshot that may end it, with periodic
// snapshots off (found on a small tmpfs: the node stayed paused and took
// no snapshot until an event was posted).
func TestIdlePauseTakesSnapshotWithoutAppends(t *testing.T) {
	e := serveWithSnapshotLoop(t, Config{SnapshotRetry: 20 * time.Millisecond})
	st := e.store

	e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1)).want(t, 200)
	st.lowSpace.Store(true)
	waitFor(t, "a snapshot while appends pause and nothing is posted", func() bool { _, n := st.counts(); return n == 1 })
	time.Sleep(3 * lowSpacePoll)
	if _, n := st.counts(); n != 1 {
		t.Fatalf("%d snapshots while paused with nothing new, want 1", n)
	}
}

// A pause lasts until a WAL allowance is free above the floor, so that it
// does not flap near it: /readyz meanwhile must not say the free space is
// below a floor it is above (found on a small tmpfs: "12.5 MiB free ...,
// below the 11.4 MiB kept").
func TestReadyzPausedAboveTheFloorSaysSo(t *testing.T) {
	srv, st := newServerOnFake(Config{})
	e := &testEnv{srv: srv, store: st, url: serveFront(t, srv)}
	st.lowSpace.Store(true)
	st.pausedFree.Store(10 << 20)
	var ready struct{ Status, Error string }
	e.do(t, "GET", "/readyz", "").want(t, 503).decode(t, &ready)
	if ready.Status != "ingest_paused" || strings.Contains(ready.Error, "below") || !strings.Contains(ready.Error, "above the 9.0 MiB") {
		t.Fatalf("readyz paused with 10 MiB free above a 9 MiB floor: %+v", ready)
	}
	st.pausedFree.Store(0)
	e.do(t, "GET", "/readyz", "").want(t, 503).decode(t, &ready)
	if !strings.Contains(ready.Error, "below the 9.0 MiB") {
		t.Fatalf("readyz paused with 1 MiB free below a 9 MiB floor: %+v", ready)
	}
}

// A server whose store never came (recovery failed or was interrupted)
// served health checks only: its stop must not say it drains requests
// (kvidx serve on a directory another server held logged that before its
// lock error).
func TestRunWithoutStoreSaysSo(t *testing.T) {
	for _, withStore := range []bool{false, true} {
		var logs logbuf.Buffer
		srv := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ShutdownTimeout: time.Second})
		if withStore {
			srv.SetStore(newFakeStore())
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx, ln) }()
		waitFor(t, "serving", func() bool { return strings.Contains(logs.String(), `msg=serving`) })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		out := logs.String()
		if drains := strings.Contains(out, "draining in-flight requests"); drains != withStore {
			t.Fatalf("store set %v: log says it drains requests: %v\n%s", withStore, drains, out)
		}
	}
}
