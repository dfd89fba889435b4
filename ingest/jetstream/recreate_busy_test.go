package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/kvidx/kvidx/internal/natstest"
)

// A stream deleted and recreated while the replica is busy (an append in
// flight, the new stream already past the replica's position) is noticed
// before any message of the new stream is applied under the old stream's
// numbering.
func TestStreamRecreatedWhileBusy(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 3)
	st := newGateStore(0)
	st.gateAt = 3
	src := New(Config{URL: url, Stream: testStream, BatchMax: 1}, st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	waitAppending(t, st) // message 3 is being appended
	deleteStream(t, url)
	publishCleared(t, url, 8) // the new stream holds 1..8
	close(st.gate)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && src.Status().Gap == "" {
		time.Sleep(10 * time.Millisecond)
	}
	if got, s := st.applied(), src.Status(); len(got) != 3 || s.Gap == "" {
		t.Fatalf("applied stream positions %v, status %+v: want the old stream's 1..3 only and the recreated stream reported", got, s)
	}
	cancel()
	<-done
	stopped = true
	// Allowed, the new stream is applied from its start, each message once.
	runSource(t, New(Config{URL: url, Stream: testStream, AllowGap: true}, &st.posStore), 8)
	if n := st.count(); n != 3+8 {
		t.Fatalf("%d events applied, want 3 from the old stream and 8 from the new, each once", n)
	}
}
