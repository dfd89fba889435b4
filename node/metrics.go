package node

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is one server's Prometheus registry and the instruments it feeds.
// Counters the engine keeps itself are not duplicated here: a collector reads
// them from the store's index at scrape time. The setter methods are safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	matchDuration   prometheus.Histogram
	walCommit       prometheus.Histogram
	walFsync        prometheus.Histogram
	walBytes        prometheus.Counter
	walWriteErrors  prometheus.Counter
	walSyncErrors   prometheus.Counter
	snapDuration    prometheus.Histogram
	snapLastIndex   prometheus.Gauge
	snapLastSuccess prometheus.Gauge
	snapFailures    prometheus.Counter
	recoveryTime    prometheus.Gauge
	recoveryEntries prometheus.Gauge
	httpRequests    *prometheus.CounterVec

	// store is read by the index collector; nil until the server has one.
	store atomic.Pointer[storeBox]
}

type storeBox struct{ s Store }

// NewMetrics returns a fresh registry holding kvidx's metrics and the Go
// runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.matchDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "kvidx_match_duration_seconds",
		Help: "Time the index takes to score one match query (engine only, no HTTP or JSON).",
		// 250ns .. ~8ms.
		Buckets: prometheus.ExponentialBuckets(250e-9, 2, 16),
	})
	m.walCommit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kvidx_wal_commit_duration_seconds",
		Help:    "Time to write one WAL entry (write(2) through tidwall/wal, without fsync).",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 11), // 1us .. ~1s
	})
	m.walFsync = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kvidx_wal_fsync_duration_seconds",
		Help:    "Time to fsync the WAL's tail segment.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 11),
	})
	m.walBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kvidx_wal_bytes_total",
		Help: "Entry payload bytes written to the WAL.",
	})
	m.walWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kvidx_wal_write_errors_total",
		Help: "WAL entry writes that failed (each fences the log).",
	})
	m.walSyncErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kvidx_wal_fsync_errors_total",
		Help: "WAL fsyncs that failed (each fences the log).",
	})
	m.snapDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kvidx_snapshot_duration_seconds",
		Help:    "Time to write and publish one snapshot.",
		Buckets: prometheus.ExponentialBuckets(1e-3, 4, 10), // 1ms .. ~4min
	})
	m.snapLastIndex = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvidx_snapshot_last_index",
		Help: "WAL index covered by the last published snapshot.",
	})
	m.snapLastSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvidx_snapshot_last_success_timestamp_seconds",
		Help: "Unix time of the last published snapshot.",
	})
	m.snapFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kvidx_snapshot_failures_total",
		Help: "Snapshots that failed.",
	})
	m.recoveryTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvidx_recovery_duration_seconds",
		Help: "Time the last start-up recovery took (snapshot load plus WAL replay).",
	})
	m.recoveryEntries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvidx_recovery_replayed_entries",
		Help: "WAL entries replayed by the last start-up recovery.",
	})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvidx_http_requests_total",
		Help: "HTTP requests answered, by route and status code.",
	}, []string{"handler", "code"})
	m.reg.MustRegister(
		m.matchDuration, m.walCommit, m.walFsync, m.walBytes, m.walWriteErrors, m.walSyncErrors,
		m.snapDuration, m.snapLastIndex, m.snapLastSuccess, m.snapFailures,
		m.recoveryTime, m.recoveryEntries, m.httpRequests,
		&indexCollector{m: m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry returns the registry, e.g. to gather or lint it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler returns the /metrics handler.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveMatch records the engine time of one match query.
func (m *Metrics) ObserveMatch(d time.Duration) { m.matchDuration.Observe(d.Seconds()) }

// ObserveSnapshot records a published snapshot: how long it took, the WAL
// index it covers and when it was published.
func (m *Metrics) ObserveSnapshot(d time.Duration, index uint64, at time.Time) {
	m.snapDuration.Observe(d.Seconds())
	m.SetLastSnapshot(index, at)
}

// SetLastSnapshot sets the last snapshot's gauges without observing a
// duration (e.g. for the snapshot recovery started from).
func (m *Metrics) SetLastSnapshot(index uint64, at time.Time) {
	m.snapLastIndex.Set(float64(index))
	m.snapLastSuccess.Set(float64(at.UnixNano()) / 1e9)
}

// SnapshotFailed counts a failed snapshot.
func (m *Metrics) SnapshotFailed() { m.snapFailures.Inc() }

// ObserveRecovery records the start-up recovery: its duration and how many
// WAL entries it replayed after the snapshot.
func (m *Metrics) ObserveRecovery(d time.Duration, replayedEntries int) {
	m.recoveryTime.Set(d.Seconds())
	m.recoveryEntries.Set(float64(replayedEntries))
}

func (m *Metrics) setStore(s Store) {
	if s == nil {
		m.store.Store(nil)
		return
	}
	m.store.Store(&storeBox{s})
}
