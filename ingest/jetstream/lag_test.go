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
	stream := testStreamOf(t, url)
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

// A replica held by a gap found while running (in a batch): its lag counts
// the messages after the gap it holds back, and those that come later.
func TestLagWhileHeldByGapRunning(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 10)
	st := newGateStore(0)
	src := New(Config{URL: url, Stream: testStream, BatchMax: 1}, st)
	defer runInBackground(src)()
	waitAppending(t, st)
	stream := testStreamOf(t, url)
	if err := stream.Purge(context.Background(), js.WithPurgeSequence(6)); err != nil {
		t.Fatal(err)
	}
	close(st.gate)
	waitUntil(t, "the gap", 10*time.Second, func() bool { return src.Status().Gap != "" })
	if s := src.Status(); s.Lag != 5 {
		t.Fatalf("status %+v: 5 messages (6..10) held back, lag %d", s, s.Lag)
	}
	// Messages published while held are not applied either: the held
	// source counts its lag again every 5 s. Found by review.
	publishCleared(t, url, 5) // 11..15
	waitUntil(t, "the lag to count 11..15", 20*time.Second, func() bool { return src.Status().Lag >= 10 })
}

// A replica held by a tail gap found while running applies nothing more:
// messages published after the gap are not applied, and its lag
// (kvidx_source_lag_messages) must count them, not stay at the 0 it had
// when the gap was found.
func TestLagWhileHeldByTailGapGrows(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 10)
	st := newGateStore(5)
	src := New(Config{URL: url, Stream: testStream, BatchMax: 1}, st)
	defer runInBackground(src)()
	waitAppending(t, st)
	stream := testStreamOf(t, url)
	deleteMsgs(t, stream, 6, 10)
	close(st.gate)
	waitUntil(t, "the tail gap", 10*time.Second, func() bool { return src.Status().Gap != "" })
	publishCleared(t, url, 5) // 11..15: never applied while held
	// The held source counts its lag again every 5 s.
	waitUntil(t, "the lag to count 11..15", 20*time.Second, func() bool { return src.Status().Lag >= 5 })
	if s := src.Status(); s.Applied != 5 || s.Lag < 5 {
		t.Fatalf("held at 5 with messages 11..15 not applied, yet status %+v (lag %d)", s, s.Lag)
	}
}
