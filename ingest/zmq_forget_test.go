package ingest

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

const (
	forgetLog     = "is no longer configured: cleared"
	forgetWarnLog = "DELETE /v1/workers/ID"
	keptLog       = "kept those ranks' blocks"
)

// An endpoint configured at an earlier start of kvidx and not now (removed,
// or spelled otherwise) kept its blocks in the index for good, stale credit
// in matches: nothing followed its engine any more. ForgetRemovedZMQ clears
// the DP ranks it fed its recorded worker id (never the id's other ranks,
// which a configured endpoint may feed) and marks it forgotten, so that a
// second start clears nothing more and a later re-add starts from nothing.
// A WAL from before the worker id was recorded cannot be cleared: a
// warning names the way out, and nothing changes. A DP rank of the id that
// B, configured, fed too is not cleared (the clear wiped B's blocks with
// A's, which B's engine still holds), nor the id removed when A's ranks
// are unknown and B feeds one of the id's.
func TestZMQRemovedEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		// bID and bRank: the worker id and DP rank endpoint B (kept
		// configured) feeds; A feeds worker 7, ranks 0 and 1.
		bID, bRank uint64
		// bBoth: B feeds rank 1 of bID too (batch 1, tokens 60).
		bBoth bool
		// bSpelling: B is A's endpoint spelled otherwise (one engine,
		// both spellings configured together at the first start).
		bSpelling bool
		// bNewID: B's worker id at the starts without A (0: bID), and
		// reconcileFirst: ReconcileZMQ runs before ForgetRemovedZMQ.
		bNewID         uint64
		reconcileFirst bool
		preRecord      bool // the WAL holds no "#worker" position of A
		ranksUnknown   bool // the WAL holds no "#dp" or "#ranks" position of A
		rename         bool // A is configured again, spelled otherwise
		readd          bool // A is configured again at a third start
		replay         bool // A has a replay endpoint
		held           map[uint64][]uint64
		workers        []engine.WorkerBlocks // nil: not checked
		forgetLogs     int
		keptLogs       int
		warnings       int // over the two starts without A
	}{
		{name: "removed", bID: 8, held: map[uint64][]uint64{10: nil, 20: nil, 50: {8}}, forgetLogs: 1},
		{name: "other ranks of the id kept", bID: 7, bRank: 2, held: map[uint64][]uint64{10: nil, 20: nil, 50: {7}},
			workers: []engine.WorkerBlocks{{Worker: engine.WorkerKey{WorkerID: 7, DPRank: 2}, Blocks: 1}}, forgetLogs: 1},
		// Rank 0 of worker 7 is fed by B too: kept (A's block with it,
		// which the index cannot tell from B's); rank 1 is A's alone.
		{name: "rank fed by a configured endpoint too", bID: 7, held: map[uint64][]uint64{10: {7}, 20: nil, 50: {7}},
			workers: []engine.WorkerBlocks{{Worker: engine.WorkerKey{WorkerID: 7}, Blocks: 2}}, forgetLogs: 1, keptLogs: 1},
		// Every rank A fed is kept: nothing is cleared, and no line says
		// it was (one said "cleared" with no rank named).
		{name: "every rank fed by a configured endpoint too", bID: 7, bBoth: true, held: map[uint64][]uint64{10: {7}, 20: {7}, 50: {7}},
			workers: []engine.WorkerBlocks{{Worker: engine.WorkerKey{WorkerID: 7}, Blocks: 2}, {Worker: engine.WorkerKey{WorkerID: 7, DPRank: 1}, Blocks: 2}}, keptLogs: 1},
		{name: "rank fed by the other spelling", bID: 7, bSpelling: true, held: map[uint64][]uint64{10: {7}, 20: nil, 50: {7}},
			workers: []engine.WorkerBlocks{{Worker: engine.WorkerKey{WorkerID: 7}, Blocks: 2}}, forgetLogs: 1, keptLogs: 1},
		// B feeds another id now: its ranks of 7 are forgotten, so A's
		// are cleared whichever of the two calls comes first.
		{name: "rank fed by a configured endpoint whose id changed", bID: 7, bNewID: 9, held: map[uint64][]uint64{10: nil, 20: nil, 50: nil}, forgetLogs: 1},
		{name: "rank fed by a configured endpoint whose id changed, reconciled first", bID: 7, bNewID: 9, reconcileFirst: true, held: map[uint64][]uint64{10: nil, 20: nil, 50: nil}, forgetLogs: 1},
		{name: "ranks unknown, id fed by a configured endpoint", bID: 7, bRank: 2, ranksUnknown: true, held: map[uint64][]uint64{10: {7}, 20: {7}, 50: {7}}, warnings: 1},
		{name: "ranks unknown, id fed by no configured endpoint", bID: 8, ranksUnknown: true, held: map[uint64][]uint64{10: nil, 20: nil, 50: {8}}},
		{name: "WAL without the worker id", bID: 8, preRecord: true, held: map[uint64][]uint64{10: {7}, 20: {7}, 50: {8}}, warnings: 2},
		{name: "renamed", bID: 8, rename: true, held: map[uint64][]uint64{10: nil, 20: nil, 30: {7}, 50: {8}}, forgetLogs: 1},
		{name: "re-added", bID: 8, readd: true, held: map[uint64][]uint64{10: nil, 20: nil, 30: {7}, 50: {8}}, forgetLogs: 1},
		// From nothing: a replay from 0, which brings the engine's
		// blocks back (the engine still holds them).
		{name: "re-added with replay", bID: 8, readd: true, replay: true, held: map[uint64][]uint64{10: {7}, 20: {7}, 30: {7}, 50: {8}}, forgetLogs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			eA, eB := newFakeEngine(t, ctx), newFakeEngine(t, ctx)
			st := oldIDFed(t, ctx, eA, tc.replay)
			specA := ZMQSpec{Endpoint: eA.pubEP, WorkerID: 7}
			if tc.replay {
				specA.Replay = eA.repEP
			}
			specB := ZMQSpec{Endpoint: eB.pubEP, WorkerID: tc.bID}
			if tc.bSpelling {
				specB.Endpoint = strings.Replace(specA.Endpoint, "127.0.0.1", "localhost", 1)
				eB = eA
			}
			b := NewZMQSource(specB, st, testOptions())
			stop := runUntilCancelled(t, ctx, b)
			feedUntil(t, eB, b, 0, storedOnRank(tc.bRank, 200, 50))
			if tc.bBoth {
				feedUntil(t, eB, b, 1, storedOnRank(1, 201, 60))
			}
			stop()
			nameA := SourceName(eA.pubEP)
			if tc.preRecord {
				st.pos = slices.DeleteFunc(st.pos, func(p wal.Position) bool { return p.Source == nameA+workerMark })
			}
			if tc.ranksUnknown {
				// As a kvidx that recorded the worker id but (after an
				// upgrade from one that recorded no rank) none of A's ranks.
				st.pos = slices.DeleteFunc(st.pos, func(p wal.Position) bool {
					return strings.HasPrefix(p.Source, nameA+rankMark) || p.Source == nameA+ranksMark
				})
			}
			eA.mu.Lock()
			eA.requests = nil
			eA.mu.Unlock()

			var logs syncBuffer
			opts := testOptions()
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			// start reconciles as serve does before any source runs.
			start := func(specs ...ZMQSpec) []*ZMQSource {
				t.Helper()
				var srcs []*ZMQSource
				for _, spec := range specs {
					srcs = append(srcs, NewZMQSource(spec, st, opts))
				}
				forget := func() {
					if err := ForgetRemovedZMQ(ctx, st, opts, srcs...); err != nil {
						t.Fatalf("ForgetRemovedZMQ: %v", err)
					}
				}
				if !tc.reconcileFirst {
					forget()
				}
				if err := ReconcileZMQ(ctx, srcs...); err != nil {
					t.Fatalf("ReconcileZMQ: %v", err)
				}
				if tc.reconcileFirst {
					forget()
				}
				return srcs
			}
			if tc.bNewID != 0 {
				specB.WorkerID = tc.bNewID
			}
			specs := []ZMQSpec{specB}
			if tc.rename {
				renamed := specA
				renamed.Endpoint = strings.Replace(specA.Endpoint, "127.0.0.1", "localhost", 1)
				specs = append(specs, renamed)
			}
			srcs := start(specs...)
			n, pos := st.Applied()
			start(specs...) // a second start: nothing more to clear
			if again, _ := st.Applied(); again != n || !slices.Equal(st.pos, pos) {
				t.Errorf("a second start appended again (%d appends) or moved positions", again-n)
			}
			if tc.readd {
				srcs = start(specA, specB)
			}
			for _, src := range srcs {
				if src.Spec().Endpoint == specB.Endpoint {
					continue
				}
				if src.Stats().HasSeq {
					t.Errorf("%s starts from sequence %d, want from nothing", src.Name(), src.Stats().LastSeq)
				}
				stop := runUntilCancelled(t, ctx, src)
				feedUntil(t, eA, src, 2, storedAt(1002, 102, 30))
				stop()
			}

			for _, tok := range []uint64{10, 20, 30, 50} {
				if got := heldBy(st, tok); !slices.Equal(got, tc.held[tok]) {
					t.Errorf("block of tokens %d held by workers %v, want %v", tok, got, tc.held[tok])
				}
			}
			if got := strings.Count(logs.String(), forgetLog); got != tc.forgetLogs {
				t.Errorf("%d log lines of a forgotten endpoint, want %d:\n%s", got, tc.forgetLogs, logs.String())
			}
			if got := strings.Count(logs.String(), keptLog); got != tc.keptLogs {
				t.Errorf("%d log lines of ranks kept, want %d:\n%s", got, tc.keptLogs, logs.String())
			}
			if got := strings.Count(logs.String(), forgetWarnLog); got != tc.warnings {
				t.Errorf("%d warnings of an endpoint that cannot be cleared, want %d:\n%s", got, tc.warnings, logs.String())
			}
			if tc.replay {
				if got := eA.replayRequests(); !slices.Equal(got, []uint64{0}) {
					t.Errorf("replays asked from %v, want from 0", got)
				}
			}
			if got := st.ix.Workers(); tc.workers != nil && !slices.Equal(got, tc.workers) {
				t.Errorf("workers %v, want %v", got, tc.workers)
			}
		})
	}
}

// removedSources names each endpoint the WAL records once, from any of its
// positions (a "#dp" rank's, a mark's, its sequence's), and none that a
// configured source owns or that is not a ZMQ endpoint's.
func TestRemovedSources(t *testing.T) {
	configured := []*ZMQSource{NewZMQSource(ZMQSpec{Endpoint: "tcp://a:1", WorkerID: 7}, &indexStore{ix: engine.New()}, testOptions())}
	for _, tc := range []struct {
		name    string
		sources []string
		want    []string
	}{
		{name: "configured only", sources: []string{"zmq:tcp://a:1", "zmq:tcp://a:1#dp3", "zmq:tcp://a:1#worker", "zmq:tcp://a:1#ranks", "nats:s"}},
		{name: "removed", sources: []string{"zmq:tcp://a:1", "zmq:tcp://b:2", "zmq:tcp://b:2#ts", "zmq:tcp://b:2#dp12", "zmq:tcp://b:2#groups"}, want: []string{"zmq:tcp://b:2"}},
		{name: "marks alone", sources: []string{"zmq:tcp://b:2#worker", "zmq:tcp://c:3#dp0", "zmq:tcp://d:4#reset"}, want: []string{"zmq:tcp://b:2", "zmq:tcp://c:3", "zmq:tcp://d:4"}},
		{name: "another spelling", sources: []string{"zmq:tcp://a:1/", "zmq:tcp://a:1/#dp0"}, want: []string{"zmq:tcp://a:1/"}},
		// An endpoint holding '#' names no other endpoint, and a
		// configured one holding it is not taken for a removed one.
		{name: "ipc path with #dp", sources: []string{"zmq:ipc:///run/kv#dp1", "zmq:ipc:///run/kv#dp1#ts", "zmq:ipc:///run/kv#dp1#worker", "zmq:ipc:///run/kv#dp1#dp0"}, want: []string{"zmq:ipc:///run/kv#dp1"}},
		{name: "ipc path with #dp, pre-#ts", sources: []string{"zmq:ipc:///run/kv#dp1", "zmq:ipc:///run/kv#dp1#dp0"}, want: []string{"zmq:ipc:///run/kv#dp1"}},
		{name: "ipc path with #dp, ranks recorded", sources: []string{"zmq:ipc:///run/kv#dp1", "zmq:ipc:///run/kv#dp1#ranks"}, want: []string{"zmq:ipc:///run/kv#dp1"}},
		{name: "ipc path with #ts, pre-#worker", sources: []string{"zmq:ipc:///tmp/e#ts", "zmq:ipc:///tmp/e#ts#ts", "zmq:ipc:///tmp/e#ts#dp0"}, want: []string{"zmq:ipc:///tmp/e#ts"}},
		{name: "configured with #", sources: []string{"zmq:tcp://a:1", "zmq:tcp://a:1#dp0", "zmq:tcp://a:1#ts#worker"}, want: []string{"zmq:tcp://a:1#ts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var positions []wal.Position
			for _, s := range tc.sources {
				positions = append(positions, wal.Position{Source: s, Seq: 1})
			}
			if got := removedSources(positions, configured); !slices.Equal(got, tc.want) {
				t.Errorf("removedSources(%v) = %v, want %v", tc.sources, got, tc.want)
			}
		})
	}
}
