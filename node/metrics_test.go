package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsLintAndValues(t *testing.T) {
	e := newEnv(t, DefaultConfig())
	e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1, 2, 3)+"\n"+stored(1, 1, "777", 1)).want(t, 200)
	e.do(t, "POST", "/v1/match", `{"local_hashes":[1,2,3]}`).want(t, 200)
	e.do(t, "POST", "/v1/snapshot", "").want(t, 200)
	e.srv.Metrics().ObserveRecovery(1500e6, 42)
	e.store.Index().Reserve(context.Background(), 6400, 2)

	problems, err := testutil.GatherAndLint(e.srv.Metrics().Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	reg := e.srv.Metrics().Registry()
	want := `
# HELP kvidx_blocks_stored_total Blocks stored by applied Stored events.
# TYPE kvidx_blocks_stored_total counter
kvidx_blocks_stored_total 3
# HELP kvidx_event_rejections_total Events the index rejected (changing nothing), by reason.
# TYPE kvidx_event_rejections_total counter
kvidx_event_rejections_total{reason="invalid_event"} 0
kvidx_event_rejections_total{reason="invalid_sequence"} 0
kvidx_event_rejections_total{reason="parent_not_found"} 1
kvidx_event_rejections_total{reason="too_many_workers"} 0
# HELP kvidx_index_entries (position, local hash) entries in the index.
# TYPE kvidx_index_entries gauge
kvidx_index_entries 3
# HELP kvidx_index_reserved_holder_blocks Holder-blocks the index was sized for at start (serve --reserve-blocks); 0 when it grows as needed.
# TYPE kvidx_index_reserved_holder_blocks gauge
kvidx_index_reserved_holder_blocks 6400
# HELP kvidx_index_reserved_worker_keys Worker keys the index was sized for at start (serve --reserve-workers).
# TYPE kvidx_index_reserved_worker_keys gauge
kvidx_index_reserved_worker_keys 2
# HELP kvidx_snapshot_last_index WAL index covered by the last published snapshot.
# TYPE kvidx_snapshot_last_index gauge
kvidx_snapshot_last_index 1
# HELP kvidx_recovery_replayed_entries WAL entries replayed by the last start-up recovery.
# TYPE kvidx_recovery_replayed_entries gauge
kvidx_recovery_replayed_entries 42
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"kvidx_blocks_stored_total", "kvidx_event_rejections_total", "kvidx_index_entries",
		"kvidx_index_reserved_holder_blocks", "kvidx_index_reserved_worker_keys",
		"kvidx_snapshot_last_index", "kvidx_recovery_replayed_entries"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(e.srv.Metrics().matchDuration); n != 1 {
		t.Fatalf("match histogram count %d", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"kvidx_events_applied_total", "kvidx_match_duration_seconds", "kvidx_snapshot_duration_seconds",
		"kvidx_http_requests_total", "go_goroutines", "process_cpu_seconds_total", "kvidx_wal_torn_bytes_dropped_total"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
	// The exposition endpoint serves them.
	r := e.do(t, "GET", "/metrics", "")
	if r.code != 200 || !strings.Contains(string(r.body), `kvidx_events_applied_total{kind="stored"} 1`) {
		t.Fatalf("/metrics: %d\n%.2000s", r.code, r.body)
	}
}

// walStore is a Store over a real wal.Log, applying in OnCommit as the
// recovery package does (without snapshots).
type walStore struct {
	*fakeStore
	log *wal.Log
}

func openWALStore(t *testing.T, dir string, m *Metrics, faults *WALFaults) *walStore {
	t.Helper()
	ws := &walStore{fakeStore: newFakeStore()}
	l, err := wal.Open(dir, &wal.Options{
		WrapStore: NewWALInstrument(m, faults),
		Logger:    quietLogger(),
		OnCommit: func(e wal.Entry) []error {
			res := make([]error, len(e.Events))
			for i := range e.Events {
				res[i] = ws.ix.Apply(&e.Events[i])
			}
			ws.mu.Lock()
			ws.index = e.Index
			ws.mu.Unlock()
			return res
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ws.log = l
	return ws
}

func (w *walStore) Append(ctx context.Context, events []engine.Event, ps []wal.Position) (uint64, []error, error) {
	return w.log.AppendResults(ctx, events, ps)
}

func (w *walStore) WALStats() wal.Stats { return w.log.Stats() }

// kvidx_wal_torn_bytes_dropped_total is the size of the torn tail the
// WAL's open cut (TestMetricsLintAndValues only sees that it exists).
func TestMetricsTornBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail []byte
	}{
		{"none", nil},
		{"partial frame", []byte{0x40, 0x01, 0x02, 0x03}},
		{"longer partial frame", append([]byte{0x7f}, make([]byte, 20)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := wal.Open(dir, &wal.Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(context.Background(), []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}}, nil); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			segs, err := wal.Segments(dir)
			if err != nil || len(segs) == 0 {
				t.Fatalf("segments %v: %v", segs, err)
			}
			f, err := os.OpenFile(filepath.Join(dir, segs[len(segs)-1].Name), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Write(tc.tail)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}

			srv := New(Config{Logger: quietLogger()})
			srv.SetStore(openWALStore(t, dir, srv.Metrics(), &WALFaults{}))
			want := fmt.Sprintf(`
# HELP kvidx_wal_torn_bytes_dropped_total Bytes cut off a torn WAL tail when the log was opened.
# TYPE kvidx_wal_torn_bytes_dropped_total counter
kvidx_wal_torn_bytes_dropped_total %d
`, len(tc.tail))
			if err := testutil.GatherAndCompare(srv.Metrics().Registry(), strings.NewReader(want), "kvidx_wal_torn_bytes_dropped_total"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWALInstrumentAndFaults(t *testing.T) {
	srv := New(Config{Logger: quietLogger()})
	faults := &WALFaults{}
	st := openWALStore(t, t.TempDir(), srv.Metrics(), faults)
	srv.SetStore(st)
	e := &testEnv{srv: srv, store: st.fakeStore}
	e.url = serveFront(t, srv)

	e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1, 2, 3)).want(t, 200)
	m := srv.Metrics()
	if n := testutil.ToFloat64(m.walBytes); n <= 0 || uint64(n) != st.log.Stats().Bytes {
		t.Fatalf("wal bytes %v, log says %d", n, st.log.Stats().Bytes)
	}
	if testutil.CollectAndCount(m.walCommit) != 1 || testutil.CollectAndCount(m.walFsync) != 1 {
		t.Fatal("wal histograms not collected")
	}

	faults.FailSyncs(syscall.ENOSPC)
	before := st.ix.Stats()
	r := e.do(t, "POST", "/v1/events", stored(0, 2, "3", 4)).want(t, 503)
	if !strings.Contains(string(r.body), "no space left on device") {
		t.Fatalf("fsync failure answer: %s", r.body)
	}
	if st.ix.Stats() != before {
		t.Fatal("a failed entry was applied")
	}
	if !st.log.Stats().Fenced {
		t.Fatal("log not fenced")
	}
	r = e.do(t, "GET", "/readyz", "").want(t, 503)
	if !strings.Contains(string(r.body), "fenced") {
		t.Fatalf("readyz: %s", r.body)
	}
	e.do(t, "POST", "/v1/match", `{"local_hashes":[1,2,3]}`).want(t, 200)
	if testutil.ToFloat64(m.walSyncErrors) != 1 {
		t.Fatal("fsync error not counted")
	}

	// A write failure, on a fresh log.
	srv2 := New(Config{Logger: quietLogger()})
	f2 := &WALFaults{}
	st2 := openWALStore(t, t.TempDir(), srv2.Metrics(), f2)
	f2.FailWrites(syscall.ENOSPC)
	_, _, err := st2.Append(context.Background(), []engine.Event{{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindCleared}}, nil)
	if !errors.Is(err, wal.ErrFenced) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append with failing writes: %v", err)
	}
	if testutil.ToFloat64(srv2.Metrics().walWriteErrors) != 1 {
		t.Fatal("write error not counted")
	}
}
