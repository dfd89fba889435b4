package ingest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// indexStore applies appended events to an index and merges positions
// last-wins, as recovery.Store does; reopening it (a process restart) keeps
// both, as recovery does from the WAL and snapshots.
type indexStore struct {
	mu  sync.Mutex
	ix  *engine.Index
	n   uint64
	pos []wal.Position
}

func (m *indexStore) Append(_ context.Context, events []engine.Event, positions []wal.Position) (uint64, []error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	results := make([]error, len(events))
	for i := range events {
		results[i] = m.ix.Apply(&events[i])
	}
	m.pos = mergePositions(m.pos, positions)
	m.n++
	return m.n, results, nil
}

func (m *indexStore) Applied() (uint64, []wal.Position) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n, slices.Clone(m.pos)
}

// storedOnRank is a vLLM batch on DP rank rank with one BlockStored event
// of one 2-token block (tokens tok, tok+1) whose engine hash is hash.
func storedOnRank(rank, hash, tok uint64) []byte {
	return newMP().arr(3).f(0).arr(1).arr(5).str("BlockStored").us(hash).null().us(tok, tok+1).u(2).u(rank).bytes()
}

// sendUntil publishes batch seq (payload p) until cond holds: the PUB
// socket drops what it sends before the subscription arrives.
func sendUntil(t *testing.T, e *fakeEngine, seq uint64, p []byte, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, func() bool {
		if cond() {
			return true
		}
		e.send([]byte("kv-events"), be64(seq), p)
		time.Sleep(20 * time.Millisecond)
		return cond()
	})
}

// An engine restart (sequence 0 after higher ones) clears the worker on
// every DP rank the source has seen, also when kvidx itself was restarted
// in between: the ranks seen before that hold blocks the restarted engine
// no longer has.
func TestZMQResetAfterSourceRestartClearsEveryRank(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	st := &indexStore{ix: engine.New()}
	spec := ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}
	src := NewZMQSource(spec, st, testOptions())
	stop := runUntilCancelled(t, ctx, src)
	sendUntil(t, e, 0, storedOnRank(0, 100, 10), "batch 0", func() bool { return src.Stats().HasSeq })
	sendUntil(t, e, 1, storedOnRank(1, 200, 20), "batch 1", func() bool { return src.Stats().LastSeq == 1 })
	stop()
	rank1 := local(tokens(2, 20), 2, "")
	if got := st.ix.Match(rank1, nil); len(got) != 1 {
		t.Fatalf("rank 1's block not stored: %v", got)
	}

	// kvidx restarts: a new source on the recovered store. Then the engine
	// restarts too: its new batch 0 is on rank 0.
	src = NewZMQSource(spec, st, testOptions())
	runSource(t, ctx, src)
	sendUntil(t, e, 0, storedOnRank(0, 300, 30), "the engine restart", func() bool { return src.Stats().Resets == 1 })
	if got := st.ix.Match(rank1, nil); len(got) != 0 {
		t.Fatalf("after the engine restarted, its DP rank 1 block (stored before kvidx restarted) is still matched: %v", got)
	}
	if got := st.ix.Match(local(tokens(2, 30), 2, ""), nil); len(got) != 1 {
		t.Fatalf("the new batch 0 was not applied: %v", got)
	}
}

// A WAL written by a kvidx from before the ranks were recorded holds the
// source's position but no "#dp" position: after the upgrade the ranks the
// source fed are unknown, and a clear (an engine restart, an undecodable
// batch), also after another restart of kvidx, must still forget the blocks
// of every rank fed before the upgrade (it forgot rank 0's only, or
// nothing, and rank 1's blocks stayed matched for ever).
func TestZMQClearAfterUpgradeFromWALWithoutRanks(t *testing.T) {
	cases := []struct {
		name string
		// restartFirst: the upgraded kvidx applies a batch (seq 2, rank 0)
		// and is restarted once more before the clear.
		restartFirst bool
		seq          uint64
		payload      []byte
		cleared      func(SourceStats) bool
	}{
		{"engine restart", false, 0, storedOnRank(0, 300, 30), func(s SourceStats) bool { return s.Resets == 1 }},
		{"engine restart after a batch and another restart of kvidx", true, 0, storedOnRank(0, 300, 30), func(s SourceStats) bool { return s.Resets == 1 }},
		{"undecodable batch", false, 2, []byte{0xc1}, func(s SourceStats) bool { return s.Errors[ReasonDecode] > 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e := newFakeEngine(t, ctx)
			st := &indexStore{ix: engine.New()}
			spec := ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}
			src := NewZMQSource(spec, st, testOptions())
			stop := runUntilCancelled(t, ctx, src)
			sendUntil(t, e, 0, storedOnRank(0, 100, 10), "batch 0", func() bool { return src.Stats().HasSeq })
			sendUntil(t, e, 1, storedOnRank(1, 200, 20), "batch 1", func() bool { return src.Stats().LastSeq == 1 })
			stop()
			// The WAL of the older kvidx: the same state, no rank recorded.
			st.pos = slices.DeleteFunc(st.pos, func(p wal.Position) bool { return p.Source != SourceName(e.pubEP) })
			rank1 := local(tokens(2, 20), 2, "")
			if got := st.ix.Match(rank1, nil); len(got) != 1 {
				t.Fatalf("rank 1's block not stored: %v", got)
			}
			if tc.restartFirst {
				src = NewZMQSource(spec, st, testOptions())
				stop = runUntilCancelled(t, ctx, src)
				sendUntil(t, e, 2, storedOnRank(0, 400, 40), "batch 2", func() bool { return src.Stats().LastSeq == 2 })
				stop()
			}
			src = NewZMQSource(spec, st, testOptions())
			runSource(t, ctx, src)
			sendUntil(t, e, tc.seq, tc.payload, "the clear", func() bool { return tc.cleared(src.Stats()) })
			waitFor(t, "the clear applied", func() bool {
				_, pos := st.Applied()
				return slices.ContainsFunc(pos, func(p wal.Position) bool { return p.Source == SourceName(e.pubEP) && p.Seq == tc.seq })
			})
			if got := st.ix.Match(rank1, nil); len(got) != 0 {
				t.Fatalf("after the clear, rank 1's block (stored before the upgrade) is still matched: %v", got)
			}
		})
	}
}

// After an upgrade from a WAL that recorded no DP rank, the clear that
// removes the worker id leaves the source's ranks known (none), and so
// does a restart of kvidx that gives the endpoint another worker id: a
// later clear, also after another restart of kvidx, forgets this source's
// ranks only, never the blocks another endpoint fed the same worker id
// since (the WAL without a "#dp" position after such a clear read as ranks
// unknown again, and the next clear removed the worker id; a Reconcile
// cleared nothing of the old id and left the new id's ranks unknown).
func TestZMQUpgradeClearLeavesRanksKnown(t *testing.T) {
	cases := []struct {
		name string
		// first is what the upgraded kvidx does with A's source (worker
		// 7 before, worker in after), given A's engine.
		first  func(t *testing.T, ctx context.Context, e *fakeEngine, st *indexStore)
		worker uint64
	}{
		{"undecodable batch", func(t *testing.T, ctx context.Context, e *fakeEngine, st *indexStore) {
			src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, testOptions())
			stop := runUntilCancelled(t, ctx, src)
			sendUntil(t, e, 1, []byte{0xc1}, "the undecodable batch", func() bool { return src.Stats().Errors[ReasonDecode] > 0 })
			waitFor(t, "the clear applied", func() bool { return src.Stats().Clears > 0 })
			stop()
		}, 7},
		{"worker id changed", func(t *testing.T, ctx context.Context, e *fakeEngine, st *indexStore) {
			// The upgraded kvidx applies a batch (recording the worker
			// id, no rank), then restarts with another worker id.
			src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, testOptions())
			stop := runUntilCancelled(t, ctx, src)
			sendUntil(t, e, 1, storedOnRank(1, 200, 20), "batch 1", func() bool { return src.Stats().LastSeq == 1 })
			stop()
			src = NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 8}, st, testOptions())
			if err := ReconcileZMQ(ctx, src); err != nil {
				t.Fatal(err)
			}
			for _, tok := range []int{10, 20} {
				if got := st.ix.Match(local(tokens(2, tok), 2, ""), nil); len(got) != 0 {
					t.Fatalf("after the worker id changed, the old id's block (tokens from %d) is still matched: %v", tok, got)
				}
			}
		}, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			a, b := newFakeEngine(t, ctx), newFakeEngine(t, ctx)
			st := &indexStore{ix: engine.New()}
			// The WAL of the older kvidx: A fed worker 7, no rank recorded.
			src := NewZMQSource(ZMQSpec{Endpoint: a.pubEP, WorkerID: 7}, st, testOptions())
			stop := runUntilCancelled(t, ctx, src)
			sendUntil(t, a, 0, storedOnRank(0, 100, 10), "batch 0", func() bool { return src.Stats().HasSeq })
			stop()
			st.pos = slices.DeleteFunc(st.pos, func(p wal.Position) bool { return p.Source != SourceName(a.pubEP) })

			tc.first(t, ctx, a, st)

			// B feeds rank 1 of A's worker id.
			srcB := NewZMQSource(ZMQSpec{Endpoint: b.pubEP, WorkerID: tc.worker}, st, testOptions())
			stop = runUntilCancelled(t, ctx, srcB)
			sendUntil(t, b, 0, storedOnRank(1, 500, 50), "B's batch 0", func() bool { return srcB.Stats().HasSeq })
			stop()
			bBlock := local(tokens(2, 50), 2, "")
			if got := st.ix.Match(bBlock, nil); len(got) != 1 {
				t.Fatalf("B's block not stored: %v", got)
			}

			// kvidx restarts; A's engine restarts (sequence 0 again, after
			// the sequence applied).
			src = NewZMQSource(ZMQSpec{Endpoint: a.pubEP, WorkerID: tc.worker}, st, testOptions())
			if err := ReconcileZMQ(ctx, src); err != nil {
				t.Fatal(err)
			}
			stop = runUntilCancelled(t, ctx, src)
			if tc.worker == 7 {
				sendUntil(t, a, 0, storedOnRank(0, 300, 30), "the engine restart", func() bool { return src.Stats().Resets == 1 })
			} else {
				// After the id changed, A starts from nothing: batch 0,
				// then a restart seen by its ts-less sequence 0 after 1.
				sendUntil(t, a, 0, storedOnRank(0, 300, 30), "batch 0", func() bool { return src.Stats().HasSeq })
				sendUntil(t, a, 1, storedOnRank(0, 301, 31), "batch 1", func() bool { return src.Stats().LastSeq == 1 })
				sendUntil(t, a, 0, storedOnRank(0, 302, 32), "the engine restart", func() bool { return src.Stats().Resets == 1 })
			}
			waitFor(t, "the clear applied", func() bool { return src.Stats().LastSeq == 0 && src.Stats().Clears > 0 })
			stop()
			if got := st.ix.Match(bBlock, nil); len(got) != 1 {
				t.Fatalf("A's clear removed the block B fed worker %d on rank 1: %v", tc.worker, got)
			}
		})
	}
}

// A source's first batch records, with its rank, that the ranks are known
// ("#ranks"): a WAL that records this source's position and no rank then
// reads as ranks unknown (one written before ranks were recorded) only
// when it is one, never because its ranks were forgotten since (a clear
// of such a source removes the whole worker id, other endpoints' ranks
// with it).
func TestZMQFirstBatchRecordsRanksKnown(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	st := &indexStore{ix: engine.New()}
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, testOptions())
	stop := runUntilCancelled(t, ctx, src)
	sendUntil(t, e, 0, storedOnRank(0, 100, 10), "batch 0", func() bool { return src.Stats().HasSeq })
	stop()
	_, pos := st.Applied()
	name := SourceName(e.pubEP)
	if !slices.Contains(pos, wal.Position{Source: name + ranksMark, Seq: 1}) {
		t.Fatalf("positions after the first batch %v: want %s%s = 1", pos, name, ranksMark)
	}
	// Its rank forgotten (a "#dp0" of 0), the position kept: ranks known.
	for i := range st.pos {
		if st.pos[i].Source == name+rankMark+"0" {
			st.pos[i].Seq = 0
		}
	}
	src = NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, testOptions())
	src.restore()
	if src.ranksUnknown {
		t.Fatalf("a source whose first batch recorded its ranks reads as ranks unknown once they are forgotten")
	}
}
