package jetstream

import (
	"context"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/internal/natstest"
)

// A replica filtered to one subject has applied every message of it; other
// subjects' messages after its last one are then trimmed from the stream
// (purged here; max-age and limits do the same). Nothing of the replica's
// subject was lost: it must stay connected with no gap, also across a
// restart (it reported "messages 2..6 are gone" within a second, and again
// at every start, until restarted with --nats-allow-gap). Found by review.
func TestFilteredTrimOfOtherSubjectsIsNoGap(t *testing.T) {
	url := natstest.Start(t)
	jsc := jetStream(t, url)
	if _, err := EnsureStream(context.Background(), jsc, testStream, testPrefix+".>"); err != nil {
		t.Fatal(err)
	}
	pub := func(subj string) {
		t.Helper()
		if _, err := jsc.Publish(context.Background(), subj, []byte(`{"worker_id":1,"event":{"data":"cleared"}}`)); err != nil {
			t.Fatal(err)
		}
	}
	pub(testPrefix + ".1") // seq 1: the replica's subject
	for range 6 {
		pub(testPrefix + ".2") // seqs 2..7: another subject
	}
	st := &posStore{}
	start := func() (stop func()) {
		src := New(Config{URL: url, Stream: testStream, Subject: testPrefix + ".1"}, st)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { src.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return func() {
			// Connected (a loaded machine may take a while), then long
			// enough for idle checks (once a second) to see the trim.
			waitUntil(t, "the source connected", 10*time.Second, func() bool { return src.Status().Connected })
			time.Sleep(2500 * time.Millisecond)
			if s := src.Status(); s.Gap != "" || !s.Connected {
				t.Fatalf("status %+v: a gap, though no message of %s.1 was lost", s, testPrefix)
			}
			cancel()
			<-done
		}
	}
	stop := start()
	for deadline := time.Now().Add(10 * time.Second); st.count() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("message 1 not applied")
		}
	}
	stream, err := jsc.Stream(context.Background(), testStream)
	if err != nil {
		t.Fatal(err)
	}
	// Remove messages 1..6 (1 applied, 2..6 another subject's); 7 stays.
	if err := stream.Purge(context.Background(), js.WithPurgeSequence(7)); err != nil {
		t.Fatal(err)
	}
	stop()
	// A restart from the recorded position finds no gap either, and a new
	// message of the subject is applied.
	stop = start()
	pub(testPrefix + ".1")
	waitUntil(t, "the new message applied", 10*time.Second, func() bool { return st.count() >= 2 })
	stop()
	if n := st.count(); n != 2 {
		t.Fatalf("%d events applied, want 2", n)
	}
}
