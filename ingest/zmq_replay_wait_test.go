package ingest

import (
	"runtime"
	"strings"
	"testing"
)

// replayReaders counts the goroutines reading a replay socket's replies.
func replayReaders() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "ingest.(*ZMQSource).replay.func")
}

// replay returns only once the goroutine reading the replies is done, so
// that Run, as documented, returns with all its goroutines done.
func TestZMQReplayWaitsForItsReader(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	for seq := range uint64(3) {
		e.publish(seq, false)
	}
	if n := replayReaders(); n != 0 {
		t.Fatalf("%d replay readers before any replay", n)
	}
	for i := range 20 {
		st := &fakeStore{}
		src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}, st, testOptions())
		if err := src.replay(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := st.seqs(); len(got) != 3 {
			t.Fatalf("replay %d applied %v, want batches 0..2", i, got)
		}
		if n := replayReaders(); n != 0 {
			t.Fatalf("replay %d returned with its reply reader still running", i)
		}
	}
}
