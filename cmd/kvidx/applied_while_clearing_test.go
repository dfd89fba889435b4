package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvidx/kvidx/internal/natstest"
)

// While a start's ZMQ clears hold the sources back (SetStorePreparing; they
// can be held long: appends paused for free space, a fenced WAL),
// kvidx_source_applied_sequence says what each source's store recorded it
// applied, as once it runs, not 0: a restarted replica that had applied
// stream message N and ZMQ batch 2 looked as if it had applied nothing.
// The clears are held open with serve's beforeClearsKey hook.
func TestServeSourcesReportAppliedWhileClearing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := natstest.Start(t)
	if out, _, err := runKvidx(t, "", "publish", "--nats-url", url, "--workers", "2", "--capacity", "16"); err != nil || !strings.Contains(out, "published") {
		t.Fatalf("publish: %v %s", err, out)
	}
	pub, ep := zmqPublisher(t, ctx)
	flags := []string{"--data-dir", t.TempDir(), "--sync", "none", "--nats-url", url, "--zmq", ep + "=7"}
	zmqName, natsName := "zmq:"+ep, "nats:KV_EVENTS"

	sctx, stop := context.WithCancel(ctx)
	base, done := serveInProcess(t, sctx, flags...)
	for seq := range uint64(3) {
		publishUntilMatched(t, pub, base, seq, 1001+seq, []uint32{uint32(4*seq + 1), 2, 3, 4}, 7)
	}
	var natsApplied string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m := scrape(t, base)
		if lag := metricValue(m, "kvidx_source_lag_messages", natsName); lag == "0" {
			if natsApplied = metricValue(m, "kvidx_source_applied_sequence", natsName); natsApplied != "" && natsApplied != "0" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream was never applied:\n%s", m)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	held, release := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context) {
		close(held)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	base, done = serveListening(t, context.WithValue(ctx, beforeClearsKey{}, hold), flags...)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("serve never began its clears")
	}
	m := scrape(t, base)
	for _, tc := range []struct{ source, want string }{{zmqName, "2"}, {natsName, natsApplied}} {
		if got := metricValue(m, "kvidx_source_applied_sequence", tc.source); got != tc.want {
			t.Errorf("during the clears, %s applied %q, want %s (recorded)", tc.source, got, tc.want)
		}
	}
	close(release)
	waitReady(t, base)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// scrape returns the server's /metrics.
func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricValue returns the value of metric name{source="source"} in
// metrics, or "" when absent.
func metricValue(metrics, name, source string) string {
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^%s\{source="%s"\} (\S+)$`, regexp.QuoteMeta(name), regexp.QuoteMeta(source)))
	if m := re.FindStringSubmatch(metrics); m != nil {
		return m[1]
	}
	return ""
}
