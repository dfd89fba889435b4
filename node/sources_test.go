package node

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSourcesInReadinessAndMetrics(t *testing.T) {
	e := newEnv(t, DefaultConfig())
	var st atomic.Pointer[SourceStatus]
	st.Store(&SourceStatus{Name: "nats:KV", Connected: true, Applied: 7, Lag: 2, Errors: map[string]uint64{"decode": 3}})
	e.srv.AddSource(func() SourceStatus { return *st.Load() })
	if r := e.do(t, "GET", "/readyz", ""); r.code != 200 {
		t.Fatalf("readyz %d %s with a healthy source", r.code, r.body)
	}
	st.Store(&SourceStatus{Name: "nats:KV", Connected: true, Problem: "stream KV messages 1..9 are gone"})
	r := e.do(t, "GET", "/readyz", "")
	if r.code != 503 || !strings.Contains(string(r.body), "source nats:KV: stream KV messages 1..9 are gone") ||
		!strings.Contains(string(r.body), `"status":"sources_not_ready"`) {
		t.Fatalf("readyz %d %s: want 503 naming the gap, status sources_not_ready (recovery is done)", r.code, r.body)
	}
	st.Store(&SourceStatus{Name: "nats:KV"})
	if r := e.do(t, "GET", "/readyz", ""); r.code != 503 || !strings.Contains(string(r.body), "not connected") {
		t.Fatalf("readyz %d %s: want 503, not connected", r.code, r.body)
	}
	// Matches keep working whatever the sources say.
	if r := e.do(t, "POST", "/v1/match", `{"local_hashes":[1]}`); r.code != 200 {
		t.Fatalf("match %d", r.code)
	}
	// Not every error is a message: a failed dial counts too (the help
	// said "Messages the source could not apply").
	st.Store(&SourceStatus{Name: "nats:KV", Connected: true, Applied: 7, Lag: 2, Errors: map[string]uint64{"decode": 3, "connect": 1}, Skipped: map[string]uint64{"other_medium": 5}})
	want := `
# HELP kvidx_source_errors_total Errors the event source met, by reason: messages it could not apply (frames, seq, decode, metadata, other_tier), batches with events of an unknown class (unknown_event), batches lost (gap), and failed dials, lost connections, replays and refused appends (connect, disconnect, replay, append).
# TYPE kvidx_source_errors_total counter
kvidx_source_errors_total{reason="connect",source="nats:KV"} 1
kvidx_source_errors_total{reason="decode",source="nats:KV"} 3
# HELP kvidx_source_lag_messages Messages of the source not yet applied.
# TYPE kvidx_source_lag_messages gauge
kvidx_source_lag_messages{source="nats:KV"} 2
# HELP kvidx_source_skipped_events_total Events the source leaves out by design, by reason.
# TYPE kvidx_source_skipped_events_total counter
kvidx_source_skipped_events_total{reason="other_medium",source="nats:KV"} 5
`
	if err := testutil.GatherAndCompare(e.srv.Metrics().Registry(), strings.NewReader(want), "kvidx_source_errors_total", "kvidx_source_lag_messages", "kvidx_source_skipped_events_total"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(e.srv.Metrics().Registry()); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}

// Two sources of one name (a library caller's mistake; serve refuses a
// repeated --zmq endpoint) must not make /metrics fail.
func TestSourcesSameNameKeepMetricsUp(t *testing.T) {
	e := newEnv(t, Config{})
	for range 2 {
		e.srv.AddSource(func() SourceStatus { return SourceStatus{Name: "zmq:tcp://h:1", Connected: true} })
	}
	e.do(t, "GET", "/metrics", "").want(t, 200)
}
