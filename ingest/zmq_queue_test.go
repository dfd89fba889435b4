package ingest

import (
	"testing"
)

// With a byte budget smaller than any message, the source queues one
// message at a time and still applies every batch in order.
func TestZMQQueueBytes(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	st := &fakeStore{}
	opts := testOptions()
	opts.QueueBytes = 1
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, opts)
	if got := src.queuedBytes([][]byte{make([]byte, 100), make([]byte, 50)}); got != 1 {
		t.Fatalf("a 150-byte message takes %d bytes of a 1-byte budget, want all of it", got)
	}
	runSource(t, ctx, src)
	waitFor(t, "connected", func() bool { return src.Stats().Connected })
	publishUntilApplied(t, e, st, 0)
	for seq := uint64(1); seq <= 50; seq++ {
		e.publish(seq, true)
	}
	waitFor(t, "batch 50", func() bool { return src.Stats().LastSeq == 50 })
	checkChain(t, st)

	def := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 8}, st, testOptions())
	if got := def.queuedBytes([][]byte{make([]byte, 100), make([]byte, 50)}); got != 150 {
		t.Fatalf("a 150-byte message takes %d bytes of the default budget", got)
	}
}
