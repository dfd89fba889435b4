package jetstream

import (
	"context"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/internal/natstest"
)

// The stream's subjects are widened while a replica runs (another source
// starts sharing the stream, as the README allows). Nothing of the
// replica's subject is lost: the other subject's messages it does not
// receive must not be taken for a gap.
func TestStreamSubjectsWidenedWhileRunning(t *testing.T) {
	url := natstest.Start(t)
	publishCleared(t, url, 3)
	st := &posStore{}
	src := New(Config{URL: url, Stream: testStream, Subject: testPrefix + ".>"}, st)
	defer runInBackground(src)()
	waitUntil(t, "3 applied", 10*time.Second, func() bool { return src.Status().Applied >= 3 })
	jsc := jetStream(t, url)
	if _, err := jsc.UpdateStream(context.Background(), js.StreamConfig{Name: testStream, Subjects: []string{testPrefix + ".>", "other.>"}, Storage: js.FileStorage}); err != nil {
		t.Fatal(err)
	}
	publishRaw(t, url, "other.x", []byte("not ours"))
	last := publishRaw(t, url, testPrefix+".1", []byte(`{"worker_id":1,"event":{"event_id":4,"data":"cleared"}}`))
	waitUntil(t, "the next message applied, or a gap", 10*time.Second, func() bool {
		s := src.Status()
		return s.Applied >= last || s.Gap != ""
	})
	if s := src.Status(); s.Gap != "" || st.count() != 4 {
		t.Fatalf("nothing of %s.> was lost, yet status %+v, %d events applied", testPrefix, s, st.count())
	}
}

// Another source stops sharing the stream: its subject is removed from the
// stream's subjects, its old messages stay. A replica restarted then sees a
// filter covering the stream, and jumps over those messages: they were not
// removed, and are no gap.
func TestStreamSubjectsNarrowedAtRestart(t *testing.T) {
	url := natstest.Start(t)
	jsc := jetStream(t, url)
	ctx := context.Background()
	if _, err := jsc.CreateStream(ctx, js.StreamConfig{Name: testStream, Subjects: []string{testPrefix + ".>", "other.>"}, Storage: js.FileStorage}); err != nil {
		t.Fatal(err)
	}
	publishCleared(t, url, 3)
	st := &posStore{}
	runSource(t, New(Config{URL: url, Stream: testStream, Subject: testPrefix + ".>"}, st), 3)
	publishRaw(t, url, "other.x", []byte("not ours")) // 4
	if _, err := jsc.UpdateStream(ctx, js.StreamConfig{Name: testStream, Subjects: []string{testPrefix + ".>"}, Storage: js.FileStorage}); err != nil {
		t.Fatal(err)
	}
	src := New(Config{URL: url, Stream: testStream, Subject: testPrefix + ".>"}, st)
	defer runInBackground(src)()
	time.Sleep(2 * time.Second)
	last := publishRaw(t, url, testPrefix+".1", []byte(`{"worker_id":1,"event":{"event_id":5,"data":"cleared"}}`)) // 5
	waitUntil(t, "message 5 applied, or a gap", 10*time.Second, func() bool { s := src.Status(); return s.Applied >= last || s.Gap != "" })
	if s := src.Status(); s.Gap != "" || st.count() != 4 {
		t.Fatalf("nothing of %s.> was lost, yet status %+v, %d events applied", testPrefix, s, st.count())
	}
}
