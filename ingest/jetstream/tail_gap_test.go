package jetstream

import (
	"context"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/internal/natstest"
)

// The stream's last messages are removed one by one (a delete, a purge of
// the subject they were on) while the replica is behind them. Nothing
// after them comes: the replica must still not report itself ready with
// them silently missing.
func TestTailDeletedWhileBehind(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 10)
	st := newGateStore(5)
	src := New(Config{URL: url, Stream: testStream, BatchMax: 1}, st)
	defer runInBackground(src)()
	waitAppending(t, st) // message 5 is being appended
	stream := testStreamOf(t, url)
	deleteMsgs(t, stream, 6, 10)
	close(st.gate)
	waitUntil(t, "message 5 applied", 10*time.Second, func() bool { return src.Status().Applied >= 5 })
	// The idle check looks at most once a second.
	waitUntil(t, "messages 6..10 reported gone", 15*time.Second, func() bool { return src.Status().Gap != "" })
}

// The same, with the replica down while the tail goes: at restart, the
// message after its position is no longer in the stream. Allowed, it goes
// on, and applies what comes next once, without reporting the gap again.
func TestTailDeletedWhileDown(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 10)
	stream := testStreamOf(t, url)
	if err := stream.Purge(context.Background(), js.WithPurgeSequence(6)); err != nil {
		t.Fatal(err)
	}
	st := &posStore{}
	runSource(t, New(Config{URL: url, Stream: testStream, AllowGap: true}, st), 10) // applies 6..10
	publishCleared(t, url, 5)                                                       // 11..15
	deleteMsgs(t, stream, 11, 15)
	src := New(Config{URL: url, Stream: testStream}, st)
	stop := runInBackground(src)
	waitUntil(t, "messages 11..15 reported gone", 15*time.Second, func() bool { return src.Status().Gap != "" })
	stop()
	src = New(Config{URL: url, Stream: testStream, AllowGap: true}, st)
	defer runInBackground(src)()
	waitUntil(t, "the gap allowed", 10*time.Second, func() bool { return src.Status().Applied == 15 })
	publishCleared(t, url, 1) // 16
	waitUntil(t, "message 16", 10*time.Second, func() bool { return src.Status().Applied == 16 })
	if n := st.count(); n != 6 || src.Status().Gap != "" {
		t.Fatalf("%d events applied (want 6: 6..10 and 16), status %+v", n, src.Status())
	}
}
