package ingest

import (
	"context"
	"slices"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// Regression tests for what a review of the ZMQ source found.

func liveMsg(seq uint64, payload []byte) [][]byte { return [][]byte{[]byte("kv"), be64(seq), payload} }

// Two DP ranks of one vLLM instance on two endpoints share the worker id
// (vLLM's usual layout). An undecodable first batch on one source must not
// clear the ranks the other feeds: with no rank of its own seen, the
// source held nothing (it sent WorkerRemoved, every rank of the id).
func TestZMQDecodeErrorKeepsOtherSourcesRanks(t *testing.T) {
	ctx := t.Context()
	st := &indexStore{ix: engine.New()}
	a := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:1", WorkerID: 7}, st, testOptions())
	b := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:2", WorkerID: 7}, st, testOptions())
	if err := a.handle(ctx, liveMsg(0, storedOnRank(0, 100, 10))); err != nil {
		t.Fatal(err)
	}
	q := local(tokens(2, 10), 2, "")
	if got := st.ix.Match(q, nil); len(got) != 1 {
		t.Fatalf("before: %v", got)
	}
	if err := b.handle(ctx, liveMsg(0, []byte{0x93, 0xc1})); err != nil {
		t.Fatal(err)
	}
	if got := st.ix.Match(q, nil); len(got) != 1 {
		t.Fatalf("source a's rank 0 block lost after an undecodable batch on source b: %v", got)
	}
	if b.Stats().Errors[ReasonDecode] != 1 {
		t.Fatalf("the undecodable batch was not counted: %+v", b.Stats())
	}
}

// A garbage message whose sequence number jumps (here to 2^62) must not
// become the position: real batches below it were dropped as duplicates,
// for good (the position is in the WAL).
func TestZMQGarbageSequenceIsNotRecorded(t *testing.T) {
	st := &fakeStore{}
	s := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, testOptions())
	handleBatches(t, s, 0, 3)
	handleBatch(t, s, liveMsg(1<<62, []byte("garbage")))
	handleBatches(t, s, 3, 6)
	// The garbage batch is recorded at the last good position (with its
	// clear), and batches 3..5 are applied after it.
	if got, want := st.seqs(), []uint64{0, 1, 2, 2, 3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("appended positions %v, want %v", got, want)
	}
	if s.Stats().Duplicates != 0 {
		t.Fatalf("real batches dropped as duplicates: %+v", s.Stats())
	}
}

// stalledStore holds appends of sequence 1 on until gate is closed.
type stalledStore struct {
	fakeStore
	gate chan struct{}
}

func (s *stalledStore) Append(ctx context.Context, ev []engine.Event, p []wal.Position) (uint64, []error, error) {
	if p[0].Seq >= 1 {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
	return s.fakeStore.Append(ctx, ev, p)
}

// Lag counts the batches received and waiting in the queue, not only the
// one being applied (it showed 1 with 49 batches waiting).
func TestZMQLagCountsQueuedBatches(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	st := &stalledStore{gate: make(chan struct{})}
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, testOptions())
	runSource(t, ctx, src)
	waitFor(t, "connected", func() bool { return src.Stats().Connected })
	publishUntilApplied(t, e, &st.fakeStore, 0)
	for seq := uint64(1); seq <= 50; seq++ {
		e.publish(seq, true)
	}
	waitFor(t, "the 50 batches to arrive", func() bool { return src.Stats().HighestSeq == 50 })
	if s := src.Stats(); s.LastSeq != 0 || s.Lag != 50 {
		t.Fatalf("stats %+v: want LastSeq 0 and Lag 50 while the store holds batch 1", s)
	}
	close(st.gate)
	waitFor(t, "batch 50 applied", func() bool { return src.Stats().LastSeq == 50 })
	if s := src.Stats(); s.Lag != 0 {
		t.Fatalf("lag %d once caught up", s.Lag)
	}
}

// An engine restart whose first batch (sequence 0) is undecodable: the
// position becomes 0, so the new engine's next batches apply (they were
// dropped as duplicates of the old engine's). Found by review.
func TestZMQUndecodableRestartBatch(t *testing.T) {
	st := &fakeStore{}
	s := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, testOptions())
	handleBatches(t, s, 0, 6)
	handleBatch(t, s, liveMsg(0, []byte("garbage")))
	handleBatches(t, s, 1, 4)
	if got, want := st.seqs(), []uint64{0, 1, 2, 3, 4, 5, 0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("positions %v, want %v (stats %+v)", got, want, s.Stats())
	}
}

// After an engine restart with the old engine's batches still queued, Lag
// counts the new engine's batches only, once the old ones are applied (the
// queued old ones raised HighestSeq again: Lag 47 after catching up).
// Found by review.
func TestZMQLagAfterRestartWithBacklog(t *testing.T) {
	ctx := t.Context()
	st := &fakeStore{}
	s := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, testOptions())
	var arrivals [][][]byte
	for q := range uint64(50) {
		arrivals = append(arrivals, liveMsg(q, batchPayload(q)))
	}
	for q := range uint64(3) {
		arrivals = append(arrivals, liveMsg(q, batchPayload(q)))
	}
	for _, m := range arrivals { // everything arrives before anything applies
		s.received(m)
	}
	for i, m := range arrivals {
		if err := s.handle(ctx, m); err != nil {
			t.Fatal(err)
		}
		if i == 50 { // the restart applied; batches 1 and 2 wait
			if st := s.Stats(); st.LastSeq != 0 || st.Lag != 2 {
				t.Fatalf("after the restart's batch 0: %+v, want LastSeq 0 and Lag 2", st)
			}
		}
	}
	if st := s.Stats(); st.LastSeq != 2 || st.Lag != 0 || st.HighestSeq != 2 {
		t.Fatalf("caught up: %+v, want LastSeq 2, HighestSeq 2, Lag 0", st)
	}
}

// A garbled first message (nothing applied yet) records no position: with
// its sequence 2^62 as the position, a source that joins mid-stream
// dropped every real batch as a duplicate.
func TestZMQGarbageFirstMessage(t *testing.T) {
	st := &fakeStore{}
	s := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, testOptions())
	handleBatch(t, s, liveMsg(1<<62, []byte("garbage")))
	handleBatches(t, s, 5, 8)
	if got, want := st.seqs(), []uint64{5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("positions %v, want %v (stats %+v)", got, want, s.Stats())
	}
}

// A garbled message's sequence, counted at arrival, does not stay the
// highest received: Lag stayed near 2^62 for good. Found by review.
func TestZMQGarbageSequenceLeavesNoLag(t *testing.T) {
	for _, first := range []bool{true, false} {
		ctx := t.Context()
		s := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, &fakeStore{}, testOptions())
		arrive := func(m [][]byte) { // as subLoop and Run do
			s.received(m)
			if err := s.handle(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if !first {
			arrive(liveMsg(4, batchPayload(4)))
		}
		arrive(liveMsg(1<<62, []byte("garbage")))
		for q := uint64(5); q < 8; q++ {
			arrive(liveMsg(q, batchPayload(q)))
		}
		if st := s.Stats(); st.LastSeq != 7 || st.HighestSeq != 7 || st.Lag != 0 {
			t.Fatalf("garbage first %v: stats %+v, want LastSeq 7, HighestSeq 7, Lag 0", first, st)
		}
	}
}

// handleBatches handles the live batches from..to-1, as the source's loop does.
func handleBatches(t *testing.T, s *ZMQSource, from, to uint64) {
	t.Helper()
	for q := from; q < to; q++ {
		handleBatch(t, s, liveMsg(q, batchPayload(q)))
	}
}

// handleBatch handles one live message.
func handleBatch(t *testing.T, s *ZMQSource, m [][]byte) {
	t.Helper()
	if err := s.handle(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}
