package jetstream

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx"
	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/logbuf"
	"github.com/kvidx/kvidx/internal/natstest"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
	"github.com/kvidx/kvidx/workload"
)

const testStream, testPrefix = "KV_EVENTS", "kv.events"

// jetStream connects to the server at url for the test's duration.
func jetStream(t *testing.T, url string) js.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	jsc, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return jsc
}

func testTrace(t *testing.T) *workload.Trace {
	t.Helper()
	tr, err := workload.ReadTrace(bytes.NewReader(kvidx.MooncakeTraceGz))
	if err != nil {
		t.Fatal(err)
	}
	tr.Records = tr.Records[:400]
	return tr
}

var testCfg = workload.Config{Workers: 8, Capacity: 256, Duplicate: 1}

// queries are the local hashes of the workload's requests.
func queries(t *testing.T, tr *workload.Trace) [][]uint64 {
	var qs [][]uint64
	for req := range workload.Requests(tr, testCfg.Duplicate) {
		qs = append(qs, slices.Clone(req.TokensHashes))
	}
	return qs
}

func openStore(t *testing.T, dir string) *recovery.Store {
	t.Helper()
	st, err := recovery.Open(context.Background(), dir, recovery.Options{Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// runSource consumes into st until it has applied seq last.
func runSource(t *testing.T, src *Source, last uint64) {
	t.Helper()
	defer runInBackground(src)()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if src.Status().Applied >= last {
			return
		}
	}
	t.Fatalf("source applied %d of %d messages", src.Status().Applied, last)
}

func sameAnswers(t *testing.T, a, b *engine.Index, qs [][]uint64) {
	t.Helper()
	if a.Stats() != b.Stats() {
		t.Fatalf("stats differ: %+v vs %+v", a.Stats(), b.Stats())
	}
	for _, q := range qs {
		if x, y := a.Match(q, nil), b.Match(q, nil); !slices.Equal(x, y) {
			t.Fatalf("query %v: %v vs %v", q[:min(3, len(q))], x, y)
		}
	}
}

// Two replicas on one stream answer every query identically, and equal an
// index fed the workload directly.
func TestTwoReplicasIdentical(t *testing.T) {
	url := natstest.Start(t)
	tr := testTrace(t)
	rep, err := Publish(context.Background(), url, testStream, testPrefix, tr, testCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	direct := engine.New()
	if err := workload.Run(context.Background(), direct, tr, testCfg, nil); err != nil {
		t.Fatal(err)
	}
	var replicas []*recovery.Store
	for range 2 {
		st := openStore(t, t.TempDir())
		defer st.Close()
		runSource(t, New(Config{URL: url, Stream: testStream, Subject: testPrefix + ".>"}, st), rep.LastSeq)
		replicas = append(replicas, st)
	}
	qs := queries(t, tr)
	sameAnswers(t, replicas[0].Index(), replicas[1].Index(), qs)
	sameAnswers(t, replicas[0].Index(), direct, qs)
}

// A message that is not events, or whose event is of another storage tier
// than the worker's device (Dynamo's host, disk and shared tiers name their
// blocks by the GPU's hashes), is counted by reason, skipped, and not read
// again.
func TestBadMessageSkipped(t *testing.T) {
	for _, tc := range []struct{ reason, msg string }{
		{"decode", "garbage"},
		{"other_tier", `{"worker_id":1,"storage_tier":"host_pinned","event":{"data":{"removed":{"block_hashes":[5]}}}}`},
	} {
		t.Run(tc.reason, func(t *testing.T) { badMessageSkipped(t, tc.reason, tc.msg) })
	}
}

func badMessageSkipped(t *testing.T, reason, bad string) {
	url := natstest.Start(t)
	jsc := jetStream(t, url)
	ctx := context.Background()
	if _, err := EnsureStream(ctx, jsc, testStream, testPrefix+".>"); err != nil {
		t.Fatal(err)
	}
	good := `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"block_hash":5,"tokens_hash":5}]}}}}`
	for _, m := range []string{good, bad} {
		if _, err := jsc.Publish(ctx, testPrefix+".1", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	st := openStore(t, dir)
	src := New(Config{URL: url, Stream: testStream}, st)
	runSource(t, src, 2)
	if n := src.Status().Errors[reason]; n != 1 {
		t.Fatalf("%s errors %d, want 1 (all: %v)", reason, n, src.Status().Errors)
	}
	if got := st.Index().Match([]uint64{5}, nil); len(got) != 1 {
		t.Fatalf("the good message was not applied, or the bad one was: %v", got)
	}
	st.Close()
	// Restarted, it reads neither message again.
	st = openStore(t, dir)
	defer st.Close()
	src = New(Config{URL: url, Stream: testStream}, st)
	runSource(t, src, 2)
	if n := src.Status().Errors[reason]; n != 0 {
		t.Fatalf("the bad message was read again after a restart")
	}
	if c := st.Index().Counters(); c.EventsStored != 1 {
		t.Fatalf("%d stored events, want 1", c.EventsStored)
	}
}

// Messages purged before a replica applied them are a gap: not skipped
// silently, unless allowed.
func TestGap(t *testing.T) {
	url := natstest.Start(t)
	tr := testTrace(t)
	rep, err := Publish(context.Background(), url, testStream, testPrefix, tr, testCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	jsc := jetStream(t, url)
	stream, _ := jsc.Stream(context.Background(), testStream)
	if err := stream.Purge(context.Background(), js.WithPurgeSequence(10)); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, t.TempDir())
	defer st.Close()
	src := New(Config{URL: url, Stream: testStream}, st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); src.Status().Gap == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	s := src.Status()
	cancel()
	<-done
	if !strings.Contains(s.Gap, "1..9 are gone") || s.Applied != 0 {
		t.Fatalf("status %+v: want the gap 1..9 reported and nothing applied", s)
	}
	src = New(Config{URL: url, Stream: testStream, AllowGap: true}, st)
	runSource(t, src, rep.LastSeq)
}

// A replica killed with SIGKILL mid-stream and restarted converges to the
// same state, its WAL holding each stream message exactly once.
func TestKilledReplicaConverges(t *testing.T) {
	if os.Getenv("KVIDX_JS_CHILD") != "" {
		t.Skip("running as the child")
	}
	url := natstest.Start(t)
	tr := testTrace(t)
	rep, err := Publish(context.Background(), url, testStream, testPrefix, tr, testCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	child := func(until uint64) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReplicaChild$")
		cmd.Env = append(os.Environ(), "KVIDX_JS_CHILD=1", "KVIDX_JS_URL="+url, "KVIDX_JS_DIR="+dir, "KVIDX_JS_UNTIL="+strconv.FormatUint(until, 10))
		return cmd
	}
	// First run: kill it once it has applied part of the stream.
	cmd := child(rep.LastSeq)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if n, err := strconv.ParseUint(strings.TrimPrefix(sc.Text(), "applied "), 10, 64); err == nil && n >= rep.LastSeq/3 {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// Second run: to the end of the stream.
	if out, err := child(rep.LastSeq).CombinedOutput(); err != nil {
		t.Fatalf("restarted replica: %v\n%s", err, out)
	}
	killed := openStore(t, dir)
	defer killed.Close()
	other := openStore(t, t.TempDir())
	defer other.Close()
	runSource(t, New(Config{URL: url, Stream: testStream}, other), rep.LastSeq)
	sameAnswers(t, killed.Index(), other.Index(), queries(t, tr))
	// Exactly once: the recorded stream positions only grow, and the WAL holds
	// every published event once.
	var last uint64
	events := 0
	if _, err := wal.Scan(dir+"/wal", 0, 0, func(e wal.Entry) error {
		for _, p := range e.Positions {
			if p.Source == PositionName(testStream) {
				if p.Seq <= last {
					return fmt.Errorf("entry %d: stream position %d after %d", e.Index, p.Seq, last)
				}
				last = p.Seq
			}
		}
		events += len(e.Events)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := killed.WALRange(); first != 1 {
		t.Fatalf("WAL starts at %d: a snapshot hides part of it, the exactly-once check needs it all", first)
	}
	if events != rep.Events || last != rep.LastSeq {
		t.Fatalf("WAL holds %d events up to stream seq %d; the stream has %d events up to %d", events, last, rep.Events, rep.LastSeq)
	}
}

// TestReplicaChild is TestKilledReplicaConverges's replica process.
func TestReplicaChild(t *testing.T) {
	if os.Getenv("KVIDX_JS_CHILD") == "" {
		t.Skip("only runs as TestKilledReplicaConverges's child")
	}
	until, _ := strconv.ParseUint(os.Getenv("KVIDX_JS_UNTIL"), 10, 64)
	st, err := recovery.Open(context.Background(), os.Getenv("KVIDX_JS_DIR"), recovery.Options{Sync: wal.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src := New(Config{URL: os.Getenv("KVIDX_JS_URL"), Stream: testStream, BatchMax: 8}, st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Run(ctx)
	for {
		a := src.Status().Applied
		fmt.Printf("applied %d\n", a)
		if a >= until {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A flood of bad messages logs a line per reason at most once a second,
// with the count it held back: the garbage in front of a message of
// another tier does not hide that one from the log (one limit shared by
// every reason logged the first garbage message and nothing else).
func TestBadMessageFloodLogsEachReason(t *testing.T) {
	url := natstest.Start(t)
	jsc := jetStream(t, url)
	ctx := context.Background()
	if _, err := EnsureStream(ctx, jsc, testStream, testPrefix+".>"); err != nil {
		t.Fatal(err)
	}
	const perReason = 100
	msgs := map[string]string{
		"decode":     "garbage",
		"other_tier": `{"worker_id":1,"storage_tier":"host_pinned","event":{"data":{"removed":{"block_hashes":[5]}}}}`,
	}
	for _, reason := range []string{"decode", "other_tier"} {
		for range perReason {
			if _, err := jsc.PublishAsync(testPrefix+".1", []byte(msgs[reason])); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-jsc.PublishAsyncComplete()
	var logs logbuf.Buffer
	st := openStore(t, t.TempDir())
	defer st.Close()
	src := New(Config{URL: url, Stream: testStream, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, st)
	start := time.Now()
	runSource(t, src, 2*perReason)
	elapsed := time.Since(start)
	out := logs.String()
	lines := strings.Count(out, `msg="skipping a message"`)
	if limit := 2 * (1 + int(elapsed/time.Second)); lines > limit {
		t.Errorf("%d lines for %d bad messages in %v, want at most %d:\n%s", lines, 2*perReason, elapsed, limit, out)
	}
	for reason, n := range src.Status().Errors {
		if n != perReason {
			t.Errorf("%s errors %d, want %d", reason, n, perReason)
		}
		if !strings.Contains(out, "reason="+reason) {
			t.Errorf("no line logged for reason %s:\n%s", reason, out)
		}
	}
}
