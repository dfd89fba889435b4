package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/natstest"
	"github.com/kvidx/kvidx/wal"
)

// refusingStore refuses appends as overloaded while refuse is set (a full
// commit queue, or appends paused on a nearly full disk).
type refusingStore struct {
	posStore
	refuse  atomic.Bool
	refused atomic.Int64
}

func (r *refusingStore) Append(ctx context.Context, evs []engine.Event, ps []wal.Position) (uint64, []error, error) {
	if r.refuse.Load() {
		r.refused.Add(1)
		return 0, nil, fmt.Errorf("test store: appends paused: %w", wal.ErrOverloaded)
	}
	return r.posStore.Append(ctx, evs, ps)
}

// While the store refuses appends as overloaded, the source retries the
// batch in its session, with backoff: it stays connected (ending the
// session reported the source down, as if NATS were), and every message is
// applied once when the store takes appends again (found by review).
func TestRefusedAppendsRetryInSession(t *testing.T) {
	url := natstest.Start(t)
	st := &refusingStore{}
	st.refuse.Store(true)
	src := New(Config{URL: url, Stream: testStream, Logger: slog.New(slog.DiscardHandler)}, st)
	src.minBackoff, src.maxBackoff = 10*time.Millisecond, 50*time.Millisecond
	publishCleared(t, url, 5)
	defer runInBackground(src)()
	waitUntil(t, "refused appends", 10*time.Second, func() bool { return st.refused.Load() >= 5 })
	if s := src.Status(); !s.Connected || s.LastError != "" {
		t.Fatalf("status while the store refuses: %+v, want connected with no session ended", s)
	}
	// At most one refusal per 20 ms (the backoff reaches 50 ms; without it
	// they come every 10 ms or faster), over the time that really passed:
	// a loaded machine oversleeps.
	n, start := st.refused.Load(), time.Now()
	time.Sleep(200 * time.Millisecond)
	d, took := st.refused.Load()-n, time.Since(start)
	if most := 1 + int64(took/(20*time.Millisecond)); d > most {
		t.Fatalf("%d refusals in %v: the retry does not back off", d, took)
	}
	st.refuse.Store(false)
	waitUntil(t, "the messages applied", 10*time.Second, func() bool { return src.Status().Applied == 5 })
	if got := st.count(); got != 5 {
		t.Fatalf("%d events applied, want 5 (each once)", got)
	}
}
