package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
)

// waitUntil polls f until it holds, failing the test after d.
func waitUntil(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !f(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// publishRaw publishes raw payloads to subject, creating the test stream
// if needed, and returns the last one's stream sequence.
func publishRaw(t *testing.T, url, subject string, payloads ...[]byte) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsc, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStream(context.Background(), jsc, testStream, testPrefix+".>"); err != nil && !errors.Is(err, js.ErrStreamNameAlreadyInUse) {
		t.Fatal(err)
	}
	var last uint64
	for _, p := range payloads {
		ack, err := jsc.Publish(context.Background(), subject, p)
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	return last
}

// runInBackground runs src until the returned function is called, which
// waits for Run to return.
func runInBackground(src *Source) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// waitAppending waits until st's Append is entered (and held at its gate).
func waitAppending(t *testing.T, st *gateStore) {
	t.Helper()
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no append")
	}
}

// testStreamOf returns the test stream on the server at url.
func testStreamOf(t *testing.T, url string) js.Stream {
	t.Helper()
	stream, err := jetStream(t, url).Stream(context.Background(), testStream)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// deleteMsgs deletes the stream's messages from..to.
func deleteMsgs(t *testing.T, stream js.Stream, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		if err := stream.DeleteMsg(context.Background(), seq); err != nil {
			t.Fatal(err)
		}
	}
}
