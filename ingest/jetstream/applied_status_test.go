package jetstream

import (
	"context"
	"net"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/internal/natstest"
	"github.com/kvidx/kvidx/wal"
)

// A restarted replica reports the position its store recorded as applied
// (kvidx_source_applied_sequence) before it consumes anything: while it
// cannot reach the server, and while a gap at startup holds it, it has
// applied that much, not nothing.
func TestAppliedReportsRecordedPositionBeforeConsuming(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 10)
	st := &posStore{}
	runSource(t, New(Config{URL: url, Stream: testStream}, st), 10)

	// The server unreachable: nothing listens on a port just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	src := New(Config{URL: "nats://" + ln.Addr().String(), Stream: testStream}, st)
	stop := runInBackground(src)
	waitUntil(t, "a failed connection", 10*time.Second, func() bool { return src.Status().LastError != "" })
	s := src.Status()
	stop()
	if s.Applied != 10 {
		t.Fatalf("unreachable server: status %+v, want applied 10", s)
	}

	// Held by a gap at startup: messages 11..14 purged before it applied them.
	publishCleared(t, url, 10)
	if err := testStreamOf(t, url).Purge(context.Background(), js.WithPurgeSequence(15)); err != nil {
		t.Fatal(err)
	}
	src = New(Config{URL: url, Stream: testStream}, st)
	stop = runInBackground(src)
	defer stop()
	waitUntil(t, "the gap", 10*time.Second, func() bool { return src.Status().Gap != "" })
	if s := src.Status(); s.Applied != 10 {
		t.Fatalf("held by a gap: status %+v, want applied 10", s)
	}
}

// A source reports what its store recorded applied before Run: kvidx
// serve runs its sources only once a start's ZMQ clears have landed.
func TestAppliedReportedBeforeRun(t *testing.T) {
	st := &posStore{pos: []wal.Position{{Source: PositionName(testStream), Seq: 10}}}
	if s := New(Config{Stream: testStream}, st).Status(); s.Applied != 10 {
		t.Fatalf("status before Run %+v, want applied 10", s)
	}
}
