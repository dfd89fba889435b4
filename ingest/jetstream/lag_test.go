package jetstream

import (
	"context"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/internal/natstest"
)

// A replica held by a gap at start has applied none of the stream's
// messages: its lag (kvidx_source_lag_messages) must say so, not 0.
func TestLagWhileHeldByGap(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 10)
	stream, err := jetStream(t, url).Stream(context.Background(), testStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background(), js.WithPurgeSequence(5)); err != nil {
		t.Fatal(err)
	}
	st := &posStore{}
	src := New(Config{URL: url, Stream: testStream}, st)
	defer runInBackground(src)()
	waitUntil(t, "the gap", 10*time.Second, func() bool { return src.Status().Gap != "" })
	if s := src.Status(); s.Lag != 6 {
		t.Fatalf("status %+v: 6 messages (5..10) not applied, lag %d", s, s.Lag)
	}
}

// A replica held by a gap found while running: its lag counts the
// messages after the gap it holds back.
func TestLagWhileHeldByGapRunning(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 10)
	st := &gateStore{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	src := New(Config{URL: url, Stream: testStream, BatchMax: 1}, st)
	defer runInBackground(src)()
	waitAppending(t, st)
	stream, err := jetStream(t, url).Stream(context.Background(), testStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background(), js.WithPurgeSequence(6)); err != nil {
		t.Fatal(err)
	}
	close(st.gate)
	waitUntil(t, "the gap", 10*time.Second, func() bool { return src.Status().Gap != "" })
	if s := src.Status(); s.Lag != 5 {
		t.Fatalf("status %+v: 5 messages (6..10) held back, lag %d", s, s.Lag)
	}
}
