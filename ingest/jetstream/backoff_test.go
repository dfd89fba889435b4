package jetstream

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvidx/kvidx/internal/natstest"
)

// waitsHandler records the "after" attribute of every log record: the
// waits Run announces before reconnecting.
type waitsHandler struct {
	mu    *sync.Mutex
	waits *[]time.Duration
}

func (h waitsHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h waitsHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h waitsHandler) WithGroup(string) slog.Handler            { return h }
func (h waitsHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "after" {
			h.mu.Lock()
			*h.waits = append(*h.waits, a.Value.Duration())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// After a good session the reconnect backoff starts again from the
// shortest wait, instead of staying at the longest one it had reached.
func TestBackoffResetsAfterGoodSession(t *testing.T) {
	url := natstest.Start(t)
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	lastWait := func() (time.Duration, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(waits) == 0 {
			return 0, 0
		}
		return waits[len(waits)-1], len(waits)
	}
	src := New(Config{URL: url, Stream: testStream, Logger: slog.New(waitsHandler{&mu, &waits})}, &posStore{})
	src.minBackoff, src.maxBackoff = 10*time.Millisecond, 200*time.Millisecond
	defer runInBackground(src)()

	// No stream yet: sessions fail and the backoff reaches its longest wait.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if w, _ := lastWait(); w == src.maxBackoff {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waits %v: the backoff never reached %v", waits, src.maxBackoff)
		}
	}
	// A good session, longer than the longest wait, then a failure.
	publishCleared(t, url, 1)
	for deadline := time.Now().Add(10 * time.Second); src.Status().Applied < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("status %+v: the message was not applied", src.Status())
		}
	}
	time.Sleep(2 * src.maxBackoff)
	_, n := lastWait()
	deleteStream(t, url)
	// The first wait after the deletion tells: the failing sessions after
	// it wait longer again, and a loaded machine may poll after several.
	firstAfter := func() (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(waits) > n {
			return waits[n], true
		}
		return 0, false
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if w, ok := firstAfter(); ok {
			if w != src.minBackoff {
				t.Fatalf("after a good session the source waits %v before reconnecting, want %v", w, src.minBackoff)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session did not end when the stream was deleted")
		}
	}
}
