package jetstream

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/natstest"
	"github.com/kvidx/kvidx/wal"
)

// gateStore is a posStore whose appends wait while the gate is closed,
// recording the stream sequences it was given.
type gateStore struct {
	posStore
	gate    chan struct{} // closed: appends go through
	gateAt  uint64        // appends of stream positions below it go through at once
	entered chan struct{} // one value per append that waits
	mu      sync.Mutex
	seqs    []uint64
}

// newGateStore returns a gateStore with its gate closed, holding the
// appends of stream positions from gateAt on.
func newGateStore(gateAt uint64) *gateStore {
	return &gateStore{gate: make(chan struct{}), entered: make(chan struct{}, 16), gateAt: gateAt}
}

func (g *gateStore) Append(ctx context.Context, evs []engine.Event, ps []wal.Position) (uint64, []error, error) {
	var seq uint64
	for _, p := range ps {
		if p.Source == PositionName(testStream) {
			seq = p.Seq
		}
	}
	select {
	case <-g.gate:
	default:
		if seq < g.gateAt {
			break
		}
		g.entered <- struct{}{}
		select {
		case <-g.gate:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
	for _, p := range ps {
		if p.Source == PositionName(testStream) {
			g.mu.Lock()
			g.seqs = append(g.seqs, p.Seq)
			g.mu.Unlock()
		}
	}
	return g.posStore.Append(ctx, evs, ps)
}

func (g *gateStore) applied() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]uint64(nil), g.seqs...)
}

// Messages purged (or expired, or dropped by the stream's limits) while a
// running replica is behind them are a gap too: the replica must not skip
// them silently; it reports the gap, as at startup, unless allowed.
func TestGapWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subject string
		allow   bool
	}{
		{"refused", "", false},
		{"allowed", "", true},
		{"filter/refused", testPrefix + ".1", false},
		{"filter/allowed", testPrefix + ".1", true},
	} {
		allow := tc.allow
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.Start(t)
			publishCleared(t, url, 10)
			st := newGateStore(0)
			src := New(Config{URL: url, Stream: testStream, Subject: tc.subject, BatchMax: 1, AllowGap: allow}, st)
			defer runInBackground(src)()
			waitAppending(t, st) // message 1 is being appended
			stream := testStreamOf(t, url)
			// Messages 2..5 go while the replica has applied none of them.
			if err := stream.Purge(context.Background(), js.WithPurgeSequence(6)); err != nil {
				t.Fatal(err)
			}
			close(st.gate)
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				s := src.Status()
				if !allow && s.Gap != "" {
					break
				}
				if allow && s.Applied >= 10 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			s := src.Status()
			got := st.applied()
			if allow {
				if s.Applied != 10 {
					t.Fatalf("status %+v, applied %v: want the gap allowed and every message up to 10 applied", s, got)
				}
				return
			}
			if !strings.Contains(s.Gap, "2..5 are gone") {
				t.Fatalf("status %+v: messages 2..5 were purged before the replica applied them, want a gap reported; applied %v", s, got)
			}
			for _, seq := range got {
				if seq > 1 {
					t.Fatalf("applied %v: messages after the gap were applied without --nats-allow-gap", got)
				}
			}
		})
	}
}

// With a filter narrower than the stream, the sequences jumped over are
// other subjects' messages: no gap.
func TestFilteredJumpsAreNotGaps(t *testing.T) {
	url := natstest.Start(t)
	jsc := jetStream(t, url)
	if _, err := EnsureStream(context.Background(), jsc, testStream, testPrefix+".>"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		subj := testPrefix + ".1"
		if i%2 == 1 {
			subj = testPrefix + ".2"
		}
		if _, err := jsc.Publish(context.Background(), subj, []byte(`{"worker_id":1,"event":{"data":"cleared"}}`)); err != nil {
			t.Fatal(err)
		}
	}
	st := &posStore{}
	src := New(Config{URL: url, Stream: testStream, Subject: testPrefix + ".1", BatchMax: 2}, st)
	runSource(t, src, 9)
	if n, s := st.count(), src.Status(); n != 5 || s.Gap != "" {
		t.Fatalf("%d events applied, status %+v: want the 5 messages of the filtered subject and no gap", n, s)
	}
}

func TestCoversStream(t *testing.T) {
	for _, c := range []struct {
		filter   string
		subjects []string
		want     bool
	}{
		{"", nil, true},
		{">", []string{"a.b"}, true},
		{"kv.events.>", []string{"kv.events.>"}, true},
		{"kv.events.>", []string{"kv.events.*", "kv.events.x.y"}, true},
		{"kv.events.>", []string{"kv.events"}, false},
		{"kv.events.>", []string{"kv.events.>", "other.>"}, false},
		{"kv.events.1", []string{"kv.events.>"}, false},
		{"kv.events.*", []string{"kv.events.>"}, false},
		{"kv.events.*", []string{"kv.events.*"}, true},
		{"kv.*.1", []string{"kv.events.1"}, true},
		{"kv.events.>", nil, false},
	} {
		if got := coversStream(c.filter, c.subjects); got != c.want {
			t.Errorf("coversStream(%q, %q) = %v, want %v", c.filter, c.subjects, got, c.want)
		}
	}
}
