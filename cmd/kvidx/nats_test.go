package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvidx/kvidx/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Two kvidx serve replicas fed by one JetStream stream (filled by kvidx
// publish) give identical answers.
func TestServeNATSReplicas(t *testing.T) {
	url := natstest.Start(t)
	out, _, err := runKvidx(t, "", "publish", "--nats-url", url, "--workers", "8", "--capacity", "256")
	if err != nil || !strings.Contains(out, "published") {
		t.Fatalf("publish: %v %s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bases []string
	var dones []<-chan error
	for range 2 {
		base, done := serveInProcess(t, ctx, "--data-dir", t.TempDir(), "--sync", "none", "--nats-url", url)
		bases, dones = append(bases, base), append(dones, done)
	}
	// Wait until both have applied the whole stream (lag 0 in /metrics is
	// racy at start; the stats' applied counters settle instead).
	stats := func(base string) string {
		resp, err := http.Get(base + "/v1/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// Index state only: the WAL fields differ between replicas.
		return string(b[:strings.Index(string(b), `"wal_first_index"`)])
	}
	var a, b string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		a, b = stats(bases[0]), stats(bases[1])
		if a == b && strings.Contains(a, `"events_stored":`) && !strings.Contains(a, `"events_stored":0`) {
			time.Sleep(300 * time.Millisecond)
			if a2 := stats(bases[0]); a2 == a {
				break
			}
		}
	}
	if a != b {
		t.Fatalf("replicas differ:\n%s\n%s", a, b)
	}
	for _, q := range []string{`{"local_hashes":[]}`, `{"tokens":[1,2,3,4],"block_size":4}`} {
		_, x := post(t, bases[0]+"/v1/match", q)
		_, y := post(t, bases[1]+"/v1/match", q)
		if x != y {
			t.Fatalf("query %s: %s vs %s", q, x, y)
		}
	}
	cancel()
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
}

// NATS flag values that can never work are refused at startup, naming the
// flag, instead of being retried for ever by the source (no server needed:
// nothing connects).
func TestNATSBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:notaport"}, `--nats-url: URL "nats://127.0.0.1:notaport"`},
		{[]string{"serve", "--nats-url", " "}, "--nats-url: "},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:4222", "--nats-stream", ""}, "--nats-stream: stream name is empty"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:4222", "--nats-stream", "a.b"}, `--nats-stream: stream name "a.b"`},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:4222", "--nats-subject", "kv..x"}, `--nats-subject: subject "kv..x": empty token`},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:4222", "--nats-subject", "kv.>.x"}, "'>' must be the last token"},
		{[]string{"publish", "--nats-url", "nats://127.0.0.1:notaport"}, `--nats-url: URL "nats://127.0.0.1:notaport"`},
		{[]string{"publish", "--nats-url", "nats://127.0.0.1:4222", "--nats-stream", "a b"}, `--nats-stream: stream name "a b"`},
	} {
		args := tc.args
		if args[0] == "serve" {
			args = append(args, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0")
		}
		_, _, err := runKvidx(t, "", args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v; want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// A --nats-subject that no subject of the stream can match keeps the node
// not ready, saying so, instead of reporting ready with nothing consumed.
func TestServeNATSSubjectMatchesNothing(t *testing.T) {
	url := natstest.Start(t)
	if _, _, err := runKvidx(t, "", "publish", "--nats-url", url, "--workers", "2", "--capacity", "16"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := serveListening(t, ctx, "--data-dir", t.TempDir(), "--sync", "none", "--nats-url", url, "--nats-subject", "other.>")
	want := "subject other.> matches none of stream KV_EVENTS's subjects (kv.events.>)"
	var code int
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !strings.Contains(body, want); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			continue
		}
		var r struct{ Error string }
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		code, body = resp.StatusCode, r.Error
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Fatalf("readyz %d %s: want 503 with %q", code, body, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// kvidx publish refuses a --subject-prefix the stream cannot take: a
// wildcard or empty one, or one an existing stream's subjects do not cover
// (it failed on the first message with "no response from stream").
func TestPublishSubjectPrefix(t *testing.T) {
	url := natstest.Start(t)
	small := []string{"publish", "--nats-url", url, "--workers", "2", "--capacity", "16"}
	if _, _, err := runKvidx(t, "", small...); err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string]string{
		"other":       "stream KV_EVENTS takes subjects kv.events.>, not other.<worker id>",
		"kv.*":        "--subject-prefix: subject \"kv.*\": wildcards",
		"":            "--subject-prefix: subject is empty",
		"kv..events":  "--subject-prefix: subject \"kv..events\": empty token",
		"kv.events.x": "",
	} {
		_, _, err := runKvidx(t, "", append(small, "--subject-prefix", prefix)...)
		if want == "" {
			if err != nil {
				t.Errorf("--subject-prefix %q: %v", prefix, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--subject-prefix %q: got %v; want an error containing %q", prefix, err, want)
		}
	}
	// A stream of "<prefix>.*" takes every subject publish uses (one token
	// after the prefix): it was refused. Found by review.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsc.CreateStream(context.Background(), jetstream.StreamConfig{Name: "STAR", Subjects: []string{"star.*"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runKvidx(t, "", append(small, "--nats-stream", "STAR", "--subject-prefix", "star")...); err != nil {
		t.Errorf("a stream of star.*: %v", err)
	}
}

// publish, a run as long as bench's, reports its progress on stderr with
// --progress (as on a terminal): the requests generated of the workload's
// total, ending at all of them; without it, when stderr is not a terminal,
// nothing.
func TestPublishReportsProgress(t *testing.T) {
	url := natstest.Start(t)
	out, stderr, err := runKvidx(t, "", "publish", "--nats-url", url, "--workers", "2", "--capacity", "16", "--progress")
	if err != nil || !strings.Contains(out, "published") {
		t.Fatalf("publish --progress: %v %s", err, out)
	}
	if !strings.Contains(stderr, "publish: 3993/3993 requests (100%)") {
		t.Fatalf("publish --progress: stderr %q, want the last progress line", stderr)
	}
	_, stderr, err = runKvidx(t, "", "publish", "--nats-url", url, "--workers", "2", "--capacity", "16", "--nats-stream", "OTHER", "--subject-prefix", "other")
	if err != nil || stderr != "" {
		t.Fatalf("publish: %v, stderr %q, want none", err, stderr)
	}
}
