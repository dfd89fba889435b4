package ingest

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// heldBy returns the worker ids whose keys hold the block of tokens tok,
// tok+1 (block size 2), sorted.
func heldBy(st *indexStore, tok uint64) []uint64 {
	var ids []uint64
	for _, sc := range st.ix.Match(local(tokens(2, int(tok)), 2, ""), nil) {
		if sc.MatchedBlocks > 0 {
			ids = append(ids, sc.Worker.WorkerID)
		}
	}
	slices.Sort(ids)
	return ids
}

// keepBatch puts payload p in e's replay buffer as batch seq.
func keepBatch(e *fakeEngine, seq uint64, p []byte) {
	e.mu.Lock()
	e.buf[seq] = p
	e.mu.Unlock()
}

// feedUntil has e publish batch seq (payload p, kept for replay) until src
// applied it.
func feedUntil(t *testing.T, e *fakeEngine, src *ZMQSource, seq uint64, p []byte) {
	t.Helper()
	keepBatch(e, seq, p)
	sendUntil(t, e, seq, p, "batch applied", func() bool { s := src.Stats(); return s.HasSeq && s.LastSeq >= seq })
}

// oldIDFed runs a source of e's endpoint for worker 7 on a new store until
// it applied batch 0 (rank 0, tokens 10) and batch 1 (rank 1, tokens 20),
// then stops it: kvidx stops, the engine keeps running.
func oldIDFed(t *testing.T, ctx context.Context, e *fakeEngine, replay bool) *indexStore {
	t.Helper()
	st := &indexStore{ix: engine.New()}
	spec := ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}
	if replay {
		spec.Replay = e.repEP
	}
	src := NewZMQSource(spec, st, testOptions())
	stop := runUntilCancelled(t, ctx, src)
	feedUntil(t, e, src, 0, storedAt(1000, 100, 10))
	feedUntil(t, e, src, 1, storedOnRank(1, 101, 20))
	stop()
	return st
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

const idChangedLog = "worker id changed since the WAL recorded it"

// A restart of kvidx that gives an endpoint another worker id clears what
// the endpoint fed the old id (the old id kept the engine's blocks for
// ever, stale credit in matches), and the new id starts from nothing: from
// a replay from 0 when the engine has a replay endpoint, else from the live
// stream. An unchanged id, or a WAL from before kvidx recorded the id,
// changes nothing.
func TestZMQWorkerIDChange(t *testing.T) {
	for _, tc := range []struct {
		name        string
		id          uint64
		replay      bool
		preRecord   bool // the WAL holds no "#worker" position
		held7       []uint64
		held8       []uint64
		idChangeLog int
		replayFrom0 bool
	}{
		{name: "changed", id: 8, held8: []uint64{30}, idChangeLog: 1},
		{name: "changed with replay", id: 8, replay: true, held8: []uint64{10, 20, 30}, idChangeLog: 1, replayFrom0: true},
		{name: "unchanged", id: 7, held7: []uint64{10, 20, 30}},
		{name: "unchanged with replay", id: 7, replay: true, held7: []uint64{10, 20, 30}},
		{name: "WAL without the id", id: 8, preRecord: true, held7: []uint64{10, 20}, held8: []uint64{30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e := newFakeEngine(t, ctx)
			st := oldIDFed(t, ctx, e, tc.replay)
			if tc.preRecord {
				st.pos = slices.DeleteFunc(st.pos, func(p wal.Position) bool { return strings.HasSuffix(p.Source, workerMark) })
			}
			e.mu.Lock()
			e.requests = nil
			e.mu.Unlock()

			var logs syncBuffer
			opts := testOptions()
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			spec := ZMQSpec{Endpoint: e.pubEP, WorkerID: tc.id}
			if tc.replay {
				spec.Replay = e.repEP
			}
			src := NewZMQSource(spec, st, opts)
			stop := runUntilCancelled(t, ctx, src)
			// The engine goes on: batch 2, rank 0, tokens 30.
			feedUntil(t, e, src, 2, storedAt(1002, 102, 30))
			stop()

			for _, tok := range []uint64{10, 20, 30} {
				var want []uint64
				if slices.Contains(tc.held7, tok) {
					want = append(want, 7)
				}
				if slices.Contains(tc.held8, tok) {
					want = append(want, 8)
				}
				if got := heldBy(st, tok); !slices.Equal(got, want) {
					t.Errorf("block of tokens %d held by workers %v, want %v", tok, got, want)
				}
			}
			if got := strings.Count(logs.String(), idChangedLog); got != tc.idChangeLog {
				t.Errorf("%d log lines of a changed worker id, want %d:\n%s", got, tc.idChangeLog, logs.String())
			}
			if got := slices.Contains(e.replayRequests(), 0); got != tc.replayFrom0 {
				t.Errorf("replay from 0 asked: %v, want %v (requests %v)", got, tc.replayFrom0, e.replayRequests())
			}
			if got := recorded(st, src.Name()+workerMark); got != tc.id {
				t.Errorf("worker id recorded %d, want %d", got, tc.id)
			}
		})
	}
}

// recorded returns the position source of st (0 if none).
func recorded(st *indexStore, source string) uint64 {
	_, ps := st.Applied()
	for _, p := range ps {
		if p.Source == source {
			return p.Seq
		}
	}
	return 0
}

// Two endpoints that swap their worker ids at a restart of kvidx (A: 7 to
// 8, B: 8 to 7): each worker ends with exactly its new engine's blocks,
// whichever source starts first (a source that cleared its old id after
// the other had applied to it would wipe that).
func TestZMQWorkerIDSwap(t *testing.T) {
	for _, order := range []string{"A first", "B first"} {
		t.Run(order, func(t *testing.T) {
			ctx := t.Context()
			eA, eB := newFakeEngine(t, ctx), newFakeEngine(t, ctx)
			st := &indexStore{ix: engine.New()}
			a := NewZMQSource(ZMQSpec{Endpoint: eA.pubEP, WorkerID: 7}, st, testOptions())
			b := NewZMQSource(ZMQSpec{Endpoint: eB.pubEP, WorkerID: 8}, st, testOptions())
			stopA, stopB := runUntilCancelled(t, ctx, a), runUntilCancelled(t, ctx, b)
			feedUntil(t, eA, a, 0, storedAt(1000, 100, 10))
			feedUntil(t, eB, b, 0, storedAt(1000, 200, 50))
			stopA()
			stopB()

			a = NewZMQSource(ZMQSpec{Endpoint: eA.pubEP, WorkerID: 8}, st, testOptions())
			b = NewZMQSource(ZMQSpec{Endpoint: eB.pubEP, WorkerID: 7}, st, testOptions())
			type started struct {
				src *ZMQSource
				e   *fakeEngine
				p   []byte
			}
			runs := []started{{a, eA, storedAt(1001, 101, 20)}, {b, eB, storedAt(1001, 201, 60)}}
			if order == "B first" {
				slices.Reverse(runs)
			}
			if err := ReconcileZMQ(ctx, runs[0].src, runs[1].src); err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				t.Cleanup(runUntilCancelled(t, ctx, r.src))
				feedUntil(t, r.e, r.src, 1, r.p)
			}
			for tok, want := range map[uint64][]uint64{10: nil, 50: nil, 20: {8}, 60: {7}} {
				if got := heldBy(st, tok); !slices.Equal(got, want) {
					t.Errorf("block of tokens %d held by workers %v, want %v", tok, got, want)
				}
			}
			want := []engine.WorkerBlocks{{Worker: engine.WorkerKey{WorkerID: 7}, Blocks: 1}, {Worker: engine.WorkerKey{WorkerID: 8}, Blocks: 1}}
			if got := st.ix.Workers(); !slices.Equal(got, want) {
				t.Errorf("workers %v, want %v", got, want)
			}
		})
	}
}

const (
	keptIDLog    = "other configured endpoints fed DP ranks of the old id that it fed too"
	clearedIDLog = "cleared what it fed the old id"
)

// A restart of kvidx that gives A another worker id (7 to 8) while B, fed
// the old id before and configured with it still, fed a DP rank A fed too
// (two endpoints given one worker id, or two spellings of one endpoint):
// A's clear of that rank wiped B's blocks, which B's engine still holds.
// The rank is kept (the index cannot tell A's blocks from B's), A's other
// ranks are cleared, and neither depends on which source reconciles first;
// a B whose id changed too feeds none of them. With A's ranks unknown the
// old id is not removed while B feeds any rank of it.
func TestZMQWorkerIDChangeSharedRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		// bRank: the rank of worker 7 B fed; bID: B's worker id at the
		// restart.
		bRank, bID   uint64
		bBoth        bool // B fed rank 1 of worker 7 too (batch 1, tokens 60)
		ranksUnknown bool // the WAL holds no "#dp" or "#ranks" position of A
		held         map[uint64][]uint64
		keptLogs     int
		clearLogs    int // lines of an old id's ranks cleared
		warnings     int
	}{
		{name: "rank fed by both", bID: 7, held: map[uint64][]uint64{10: {7}, 20: nil, 50: {7}}, keptLogs: 1, clearLogs: 1},
		// Nothing is cleared, and no line says it was (one said
		// "cleared" with no rank named).
		{name: "every rank fed by both", bID: 7, bBoth: true, held: map[uint64][]uint64{10: {7}, 20: {7}, 50: {7}}, keptLogs: 1},
		{name: "other rank", bRank: 2, bID: 7, held: map[uint64][]uint64{10: nil, 20: nil, 50: {7}}, clearLogs: 1},
		{name: "B's id changed too", bID: 9, held: map[uint64][]uint64{10: nil, 20: nil, 50: nil}, clearLogs: 2},
		{name: "ranks unknown", bRank: 2, bID: 7, ranksUnknown: true, held: map[uint64][]uint64{10: {7}, 20: {7}, 50: {7}}, warnings: 1},
		// A removes the old id whole, and says so (not "cleared" with no
		// rank named); B clears its rank of it.
		{name: "ranks unknown, B's id changed too", bID: 9, ranksUnknown: true, held: map[uint64][]uint64{10: nil, 20: nil, 50: nil}, clearLogs: 1},
	} {
		for _, order := range []string{"A first", "B first"} {
			t.Run(tc.name+", "+order, func(t *testing.T) {
				ctx := t.Context()
				eA, eB := newFakeEngine(t, ctx), newFakeEngine(t, ctx)
				st := oldIDFed(t, ctx, eA, false)
				b := NewZMQSource(ZMQSpec{Endpoint: eB.pubEP, WorkerID: 7}, st, testOptions())
				stop := runUntilCancelled(t, ctx, b)
				feedUntil(t, eB, b, 0, storedOnRank(tc.bRank, 200, 50))
				if tc.bBoth {
					feedUntil(t, eB, b, 1, storedOnRank(1, 201, 60))
				}
				stop()
				if tc.ranksUnknown {
					nameA := SourceName(eA.pubEP)
					st.pos = slices.DeleteFunc(st.pos, func(p wal.Position) bool {
						return strings.HasPrefix(p.Source, nameA+rankMark) || p.Source == nameA+ranksMark
					})
				}

				var logs syncBuffer
				opts := testOptions()
				opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				srcs := []*ZMQSource{
					NewZMQSource(ZMQSpec{Endpoint: eA.pubEP, WorkerID: 8}, st, opts),
					NewZMQSource(ZMQSpec{Endpoint: eB.pubEP, WorkerID: tc.bID}, st, opts),
				}
				if order == "B first" {
					slices.Reverse(srcs)
				}
				if err := ReconcileZMQ(ctx, srcs...); err != nil {
					t.Fatal(err)
				}
				for _, tok := range []uint64{10, 20, 50} {
					if got := heldBy(st, tok); !slices.Equal(got, tc.held[tok]) {
						t.Errorf("block of tokens %d held by workers %v, want %v", tok, got, tc.held[tok])
					}
				}
				if got := strings.Count(logs.String(), keptIDLog); got != tc.keptLogs {
					t.Errorf("%d log lines of ranks kept, want %d:\n%s", got, tc.keptLogs, logs.String())
				}
				if got := strings.Count(logs.String(), clearedIDLog); got != tc.clearLogs {
					t.Errorf("%d log lines of ranks cleared, want %d:\n%s", got, tc.clearLogs, logs.String())
				}
				if got := strings.Count(logs.String(), "DELETE /v1/workers/ID"); got != tc.warnings {
					t.Errorf("%d warnings of the old id kept, want %d:\n%s", got, tc.warnings, logs.String())
				}
				// A's positions are forgotten all the same: it starts from
				// nothing, and a second start changes nothing.
				n, pos := st.Applied()
				a := NewZMQSource(ZMQSpec{Endpoint: eA.pubEP, WorkerID: 8}, st, opts)
				if err := ReconcileZMQ(ctx, a); err != nil {
					t.Fatal(err)
				}
				if a.Stats().HasSeq || len(a.ranks) != 0 {
					t.Errorf("A after the reconcile: sequence recorded %v, ranks %v; want nothing", a.Stats().HasSeq, a.ranks)
				}
				if again, _ := st.Applied(); again != n || !slices.Equal(st.pos, pos) {
					t.Errorf("a second start appended again (%d appends) or moved positions", again-n)
				}
			})
		}
	}
}

// refusingStore refuses appends while refuse is above 0 (counting down) or
// below 0 (for ever), as a store low on space or fenced does.
type refusingStore struct {
	*indexStore
	refuse atomic.Int64
}

func (s *refusingStore) Append(ctx context.Context, events []engine.Event, positions []wal.Position) (uint64, []error, error) {
	if n := s.refuse.Load(); n != 0 {
		if n > 0 {
			s.refuse.Add(-1)
		}
		return 0, nil, wal.ErrOverloaded
	}
	return s.indexStore.Append(ctx, events, positions)
}

// A crash of kvidx (or a store refusing appends) between the reconcile of
// a changed worker id and the endpoint's first batch loses and revives
// nothing: a restart reconciles to the same state, and the new id then
// gets the engine's batches as without the crash.
func TestZMQWorkerIDChangeCrashBeforeFirstBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		// refuse: appends the store refuses first (-1: all of them, until
		// the process is killed); completed: whether the first
		// reconcile's append landed.
		refuse    int64
		completed bool
	}{
		{name: "killed after the reconcile", completed: true},
		{name: "append refused then taken", refuse: 3, completed: true},
		{name: "killed while appends are refused", refuse: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e := newFakeEngine(t, ctx)
			st := oldIDFed(t, ctx, e, false)
			spec := ZMQSpec{Endpoint: e.pubEP, WorkerID: 8}
			rs := &refusingStore{indexStore: st}
			rs.refuse.Store(tc.refuse)
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			before, _ := st.Applied()
			err := NewZMQSource(spec, rs, testOptions()).Reconcile(rctx)
			cancel()
			after, _ := st.Applied()
			if (err == nil) != tc.completed || (after == before+1) != tc.completed {
				t.Fatalf("Reconcile: %v, %d appends; want completed %v", err, after-before, tc.completed)
			}
			want := []uint64{7}
			if tc.completed {
				want = nil
			}
			for _, tok := range []uint64{10, 20} {
				if got := heldBy(st, tok); !slices.Equal(got, want) {
					t.Errorf("after the first start, block of tokens %d held by %v, want %v", tok, got, want)
				}
			}

			// kvidx starts again (the process died before the first batch).
			_, pos := st.Applied()
			src := NewZMQSource(spec, st, testOptions())
			if err := ReconcileZMQ(ctx, src); err != nil {
				t.Fatal(err)
			}
			if again, _ := st.Applied(); tc.completed && (again != after || !slices.Equal(st.pos, pos)) {
				t.Errorf("a second reconcile appended again (%d appends) or moved positions", again-after)
			}
			stop := runUntilCancelled(t, ctx, src)
			feedUntil(t, e, src, 2, storedAt(1002, 102, 30))
			stop()
			for tok, want := range map[uint64][]uint64{10: nil, 20: nil, 30: {8}} {
				if got := heldBy(st, tok); !slices.Equal(got, want) {
					t.Errorf("block of tokens %d held by workers %v, want %v", tok, got, want)
				}
			}
		})
	}
}

// A WAL from a kvidx that recorded no DP ranks, run once since by a kvidx
// that records the worker id (so "#worker" is there but no "#dp"), then a
// restart with another id: the ranks the endpoint fed the old id are
// unknown, so the reconcile removes the old id (as the first clear after
// such an upgrade does), else the old id kept the engine's blocks for ever.
func TestZMQWorkerIDChangeRanksUnknown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    uint64
		held7 []uint64
		held8 []uint64
	}{
		{name: "changed", id: 8, held8: []uint64{40}},
		{name: "unchanged", id: 7, held7: []uint64{10, 20, 30, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e := newFakeEngine(t, ctx)
			st := oldIDFed(t, ctx, e, false)
			// As the kvidx before ranks were recorded wrote it: no "#dp",
			// "#ranks" or "#worker" positions.
			st.pos = slices.DeleteFunc(st.pos, func(p wal.Position) bool {
				return strings.Contains(p.Source, rankMark) || strings.HasSuffix(p.Source, ranksMark) || strings.HasSuffix(p.Source, workerMark)
			})

			// Today's kvidx, the same id: it records the id, not the ranks.
			src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, testOptions())
			stop := runUntilCancelled(t, ctx, src)
			feedUntil(t, e, src, 2, storedAt(1002, 102, 30))
			stop()

			src = NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: tc.id}, st, testOptions())
			stop = runUntilCancelled(t, ctx, src)
			feedUntil(t, e, src, 3, storedAt(1003, 103, 40))
			stop()
			for _, tok := range []uint64{10, 20, 30, 40} {
				var want []uint64
				if slices.Contains(tc.held7, tok) {
					want = append(want, 7)
				}
				if slices.Contains(tc.held8, tok) {
					want = append(want, 8)
				}
				if got := heldBy(st, tok); !slices.Equal(got, want) {
					t.Errorf("block of tokens %d held by workers %v, want %v", tok, got, want)
				}
			}
		})
	}
}
