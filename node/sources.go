package node

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// SourceStatus is one event source's state (a NATS stream, a vLLM ZMQ
// endpoint), for /readyz and the metrics.
type SourceStatus struct {
	// Name identifies the source, e.g. "nats:KV_EVENTS".
	Name      string
	Connected bool
	// Applied is the source sequence of the last message applied; Lag how
	// many messages it is behind.
	Applied, Lag uint64
	// Problem, when not empty, makes the node not ready (e.g. a gap in a
	// stream that the source refuses to skip).
	Problem string
	// Errors counts messages the source could not apply, by reason.
	Errors map[string]uint64
	// Skipped counts events the source leaves out by design, by reason
	// (e.g. "other_medium": a vLLM engine's CPU offloading tier).
	Skipped map[string]uint64
	// LastError, when not connected, says why (the last failed connection
	// attempt or the error that ended the connection).
	LastError string
}

// sources holds the status functions of the node's event sources, and the
// loops started with GoSource.
type sources struct {
	mu      sync.Mutex
	fns     []func() SourceStatus
	ctx     context.Context // the loops' context, ended by Run's shutdown
	cancel  context.CancelFunc
	stopped bool
	running sync.WaitGroup
}

// GoSource runs an event source's loop on a goroutine of its own until Run
// shuts down. Run ends the loop's context when the shutdown begins and
// waits for the loop to return before the final snapshot, so that the
// snapshot covers every entry a source appended: a restart after a clean
// stop replays nothing. A loop started after the shutdown does not run. Its
// error is the source's to report (sources log their own).
func (s *Server) GoSource(run func(ctx context.Context) error) {
	ss := &s.sources
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stopped {
		return
	}
	ss.running.Go(func() { _ = run(ss.ctx) })
}

// stop ends the sources' loops and waits for them; no loop starts after.
func (ss *sources) stop() {
	ss.mu.Lock()
	ss.stopped = true
	ss.mu.Unlock()
	ss.cancel()
	ss.running.Wait()
}

func (ss *sources) all() []SourceStatus {
	ss.mu.Lock()
	fns := append([]func() SourceStatus(nil), ss.fns...)
	ss.mu.Unlock()
	out := make([]SourceStatus, len(fns))
	for i, fn := range fns {
		out[i] = fn()
	}
	return out
}

// AddSource registers an event source: /readyz answers 503 while any source
// is disconnected or reports a problem, and the metrics show each source's
// state. Names should be unique: /metrics shows only the first source of a
// name.
func (s *Server) AddSource(status func() SourceStatus) {
	s.sources.mu.Lock()
	s.sources.fns = append(s.sources.fns, status)
	s.sources.mu.Unlock()
}

// sourcesNotReady says why the sources keep the node from being ready, or "".
func (s *Server) sourcesNotReady() string {
	var why []string
	for _, st := range s.sources.all() {
		switch {
		case st.Problem != "":
			why = append(why, fmt.Sprintf("source %s: %s", st.Name, st.Problem))
		case !st.Connected && st.LastError != "":
			why = append(why, fmt.Sprintf("source %s: not connected: %s", st.Name, st.LastError))
		case !st.Connected:
			why = append(why, fmt.Sprintf("source %s: not connected", st.Name))
		}
	}
	return strings.Join(why, "; ")
}

// sourceCollector exports the sources' state at scrape time.
type sourceCollector struct{ ss *sources }

var (
	descSourceConnected = prometheus.NewDesc("kvidx_source_connected", "1 when the event source is connected.", []string{"source"}, nil)
	descSourceApplied   = prometheus.NewDesc("kvidx_source_applied_sequence", "Source sequence of the last message applied.", []string{"source"}, nil)
	descSourceLag       = prometheus.NewDesc("kvidx_source_lag_messages", "Messages of the source not yet applied.", []string{"source"}, nil)
	descSourceErrors    = prometheus.NewDesc("kvidx_source_errors_total", "Errors the event source met, by reason: messages it could not apply "+
		"(frames, seq, decode, metadata, other_tier), batches with events of an unknown class (unknown_event), batches lost (gap), "+
		"and failed dials, lost connections, replays and refused appends (connect, disconnect, replay, append).", []string{"source", "reason"}, nil)
	descSourceSkipped = prometheus.NewDesc("kvidx_source_skipped_events_total", "Events the source leaves out by design, by reason.", []string{"source", "reason"}, nil)
)

func (c sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSourceConnected
	ch <- descSourceApplied
	ch <- descSourceLag
	ch <- descSourceErrors
	ch <- descSourceSkipped
}

func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, st := range c.ss.all() {
		// A repeated name would make the registry refuse the whole
		// scrape: the first source of a name is exported, not the others.
		if seen[st.Name] {
			continue
		}
		seen[st.Name] = true
		connected := 0.0
		if st.Connected {
			connected = 1
		}
		ch <- prometheus.MustNewConstMetric(descSourceConnected, prometheus.GaugeValue, connected, st.Name)
		ch <- prometheus.MustNewConstMetric(descSourceApplied, prometheus.GaugeValue, float64(st.Applied), st.Name)
		ch <- prometheus.MustNewConstMetric(descSourceLag, prometheus.GaugeValue, float64(st.Lag), st.Name)
		byReason(ch, descSourceErrors, st.Name, st.Errors)
		byReason(ch, descSourceSkipped, st.Name, st.Skipped)
	}
}

// byReason sends a counter of desc for each reason of counts, in order.
func byReason(ch chan<- prometheus.Metric, desc *prometheus.Desc, source string, counts map[string]uint64) {
	reasons := make([]string, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(counts[r]), source, r)
	}
}
