package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// storedAt is a batch of ts (engine seconds) storing one block (hash,
// tokens tok, tok+1) on DP rank 0.
func storedAt(ts float64, hash, tok uint64) []byte {
	return newMP().arr(3).f(ts).arr(1).arr(5).str("BlockStored").us(hash).null().us(tok, tok+1).u(2).u(0).bytes()
}

// applyOldEngine has e publish batches 0..5 (ts 1000+seq, one block each:
// tokens 10+2seq) until src applied each.
func applyOldEngine(t *testing.T, e *fakeEngine, src *ZMQSource) {
	t.Helper()
	for seq := uint64(0); seq <= 5; seq++ {
		p := storedAt(1000+float64(seq), 100+seq, 10+2*seq)
		e.mu.Lock()
		e.buf[seq] = p
		e.mu.Unlock()
		sendUntil(t, e, seq, p, "old batch", func() bool { s := src.Stats(); return s.HasSeq && s.LastSeq == seq })
	}
}

// oldEngineApplied returns a source without sockets to which batches
// 0..last of applyOldEngine's engine were delivered live.
func oldEngineApplied(t *testing.T, last uint64) *ZMQSource {
	t.Helper()
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:1", WorkerID: 7}, &indexStore{ix: engine.New()}, testOptions())
	for seq := uint64(0); seq <= last; seq++ {
		if err := src.deliver(t.Context(), seq, storedAt(1000+float64(seq), 100+seq, 10+2*seq), false); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// appliedThenAway runs a source with a replay endpoint on a fake engine
// until it applied applyOldEngine's batches, then stops it (kvidx away).
// held tells whether the index holds the block of token tok.
func appliedThenAway(t *testing.T, ctx context.Context) (e *fakeEngine, st *indexStore, spec ZMQSpec, held func(tok uint64) bool) {
	t.Helper()
	e = newFakeEngine(t, ctx)
	st = &indexStore{ix: engine.New()}
	spec = ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}
	held = func(tok uint64) bool { return len(st.ix.Match(local(tokens(2, int(tok)), 2, ""), nil)) != 0 }
	src := NewZMQSource(spec, st, testOptions())
	stop := runUntilCancelled(t, ctx, src)
	applyOldEngine(t, e, src)
	stop()
	return e, st, spec, held
}

// restartEngine replaces e's replay buffer with a restarted engine's
// batches 0..last (ts 2000+seq, one block each: tokens 500+2seq).
func restartEngine(e *fakeEngine, last uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf = map[uint64][]byte{}
	for seq := uint64(0); seq <= last; seq++ {
		e.buf[seq] = storedAt(2000+float64(seq), 900+seq, 500+2*seq)
	}
}

// An engine that restarts while kvidx is away comes back at sequences at
// or below the last one applied, which were dropped as duplicates while
// the old engine's blocks stayed held (found by review). Its batches are
// made after the one applied last: the source tells them by their ts,
// clears the worker and takes the new engine's batches from 0 (by replay,
// or as a gap without a replay endpoint), while a true duplicate (the same
// batch again) is still dropped.
func TestEngineRestartWhileAway(t *testing.T) {
	for _, withReplay := range []bool{true, false} {
		name := "replay"
		if !withReplay {
			name = "no replay"
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			e := newFakeEngine(t, ctx)
			st := &indexStore{ix: engine.New()}
			spec := ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}
			if withReplay {
				spec.Replay = e.repEP
			}
			held := func(tok uint64) bool { return len(st.ix.Match(local(tokens(2, int(tok)), 2, ""), nil)) != 0 }

			src := NewZMQSource(spec, st, testOptions())
			stop := runUntilCancelled(t, ctx, src)
			applyOldEngine(t, e, src)
			// The same batch again: a duplicate, not a restart.
			sendUntil(t, e, 5, storedAt(1005, 105, 20), "a duplicate", func() bool { return src.Stats().Duplicates > 0 })
			if s := src.Stats(); s.Resets != 0 || s.Clears != 0 {
				t.Fatalf("a duplicate taken for a restart: %+v", s)
			}
			stop()

			// The engine restarts while kvidx is away: its batches 0..3
			// are in its replay buffer only.
			restartEngine(e, 3)
			src = NewZMQSource(spec, st, testOptions())
			runSource(t, ctx, src)
			for seq := uint64(4); seq <= 8; seq++ {
				p := storedAt(2000+float64(seq), 900+seq, 500+2*seq)
				e.mu.Lock()
				e.buf[seq] = p
				e.mu.Unlock()
				sendUntil(t, e, seq, p, "new batch", func() bool { s := src.Stats(); return s.Resets > 0 && s.LastSeq >= seq })
			}
			for seq := uint64(0); seq <= 5; seq++ {
				if held(10 + 2*seq) {
					t.Errorf("the old engine's block of batch %d is still held", seq)
				}
			}
			first := uint64(4) // without replay, the new engine's 0..3 are lost
			if withReplay {
				first = 0
			}
			for seq := first; seq <= 8; seq++ {
				if !held(500 + 2*seq) {
					t.Errorf("the new engine's block of batch %d is missing", seq)
				}
			}
			if s := src.Stats(); s.Resets != 1 || (s.Errors[ReasonGap] > 0) == withReplay {
				t.Errorf("stats: resets %d, gap errors %d (replay %v)", s.Resets, s.Errors[ReasonGap], withReplay)
			}
		})
	}
}

// An engine clock stepped back between two batches does not make the
// queued live copy of the earlier one a restart: the latest ts applied is
// what a batch is compared with (found by review: the last one's was, and
// the worker was cleared).
func TestClockStepBackIsNoRestart(t *testing.T) {
	ctx := t.Context()
	st := &indexStore{ix: engine.New()}
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:1", WorkerID: 7}, st, testOptions())
	deliver := func(seq uint64, ts float64, replayed bool) {
		t.Helper()
		if err := src.deliver(ctx, seq, storedAt(ts, 100+seq, 10+2*seq), replayed); err != nil {
			t.Fatal(err)
		}
	}
	deliver(0, 1000, false)
	deliver(1, 1001, false)
	deliver(2, 1002, true)
	deliver(3, 999.5, true) // the clock stepped back
	deliver(2, 1002, false) // the queued live copy of batch 2
	if s := src.Stats(); s.Resets != 0 || s.Clears != 0 || s.Duplicates != 1 {
		t.Fatalf("resets %d, clears %d, duplicates %d: want a duplicate only", s.Resets, s.Clears, s.Duplicates)
	}
	for seq := uint64(0); seq <= 3; seq++ {
		if len(st.ix.Match(local(tokens(2, int(10+2*seq)), 2, ""), nil)) == 0 {
			t.Errorf("the block of batch %d is gone", seq)
		}
	}
}

// An engine that restarted while kvidx was away and is already past the
// last sequence applied: the replay asked from that sequence (not the one
// after) returns the new engine's batch there, made after the old one's:
// a restart, where the batches after it alone passed for the old engine's
// continuation and its blocks stayed held.
func TestEngineRestartPastTheLastSequence(t *testing.T) {
	ctx := t.Context()
	e, st, spec, held := appliedThenAway(t, ctx)

	// The new engine got to batch 9 while kvidx was away.
	restartEngine(e, 9)
	src := NewZMQSource(spec, st, testOptions())
	runSource(t, ctx, src)
	waitFor(t, "the new engine's batches", func() bool { s := src.Stats(); return s.Resets == 1 && s.LastSeq == 9 })
	p := storedAt(2010, 910, 520)
	e.mu.Lock()
	e.buf[10] = p
	e.mu.Unlock()
	sendUntil(t, e, 10, p, "new batch 10", func() bool { return src.Stats().LastSeq == 10 })
	for seq := uint64(0); seq <= 5; seq++ {
		if held(10 + 2*seq) {
			t.Errorf("the old engine's block of batch %d is still held", seq)
		}
	}
	for seq := uint64(0); seq <= 10; seq++ {
		if !held(500 + 2*seq) {
			t.Errorf("the new engine's block of batch %d is missing", seq)
		}
	}
	if s := src.Stats(); s.Errors[ReasonGap] != 0 || s.Clears != 1 {
		t.Errorf("stats: gap errors %d, clears %d; want 0 and 1", s.Errors[ReasonGap], s.Clears)
	}
}

// A batch without a ts, or one that does not decode, leaves the latest ts
// applied as it was: it reset it to 0, and a clock stepped back after it
// made the live copy of an earlier batch look like a restart (found by
// review: the worker was cleared and the recorded sequence went back).
func TestBatchWithoutTSKeepsTheLatest(t *testing.T) {
	noTS := newMP().arr(3).null().arr(1).arr(5).str("BlockStored").us(102).null().us(14, 15).u(2).u(0).bytes()
	undecodable := newMP().arr(2).f(1002).u(5).bytes()
	for name, p2 := range map[string][]byte{"no ts": noTS, "undecodable": undecodable} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			src := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:1", WorkerID: 7}, &indexStore{ix: engine.New()}, testOptions())
			for _, d := range []struct {
				seq      uint64
				p        []byte
				replayed bool
			}{
				{0, storedAt(1000, 100, 10), false},
				{1, storedAt(1001, 101, 12), true},
				{2, p2, true},
				{3, storedAt(999.5, 103, 16), true}, // the clock stepped back
				{1, storedAt(1001, 101, 12), false}, // the queued live copy of 1
			} {
				if err := src.deliver(ctx, d.seq, d.p, d.replayed); err != nil {
					t.Fatal(err)
				}
			}
			if s := src.Stats(); s.Resets != 0 || s.LastSeq != 3 {
				t.Fatalf("a duplicate taken for a restart: resets %d, clears %d, last %d", s.Resets, s.Clears, s.LastSeq)
			}
		})
	}
}

// A replay endpoint answering out of order, each batch later than the
// last, made every replayed batch a restart, each a replay from 0 nested
// in the one before, without end (found by review): one replay from 0 runs
// at a time.
func TestRestartReplaysDoNotNest(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	st := &indexStore{ix: engine.New()}
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}, st, testOptions())
	runSource(t, ctx, src)
	applyOldEngine(t, e, src)
	k := 0.0
	e.mu.Lock()
	e.answer = func(_ uint64, buf map[uint64][]byte) ([]uint64, bool) {
		k += 2
		buf[2] = storedAt(3000+k, 902, 600)
		buf[1] = storedAt(3001+k, 901, 602)
		return []uint64{2, 1}, true
	}
	e.mu.Unlock()
	e.send([]byte("kv-events"), be64(1), storedAt(2000, 900, 500)) // a restarted engine, live
	waitFor(t, "a restart", func() bool { return src.Stats().Resets > 0 })
	time.Sleep(time.Second)
	if n := len(e.replayRequests()); n > 10 {
		t.Fatalf("%d replay requests in a second after one restart: replays nest", n)
	}
}

// A restart seen live while the replay endpoint is silent asks for one
// replay from 0: the batch that showed it asked again, as a gap (found by
// review: two replay timeouts for one restart).
func TestRestartWithSilentReplayAsksOnce(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	st := &indexStore{ix: engine.New()}
	opts := testOptions()
	opts.ReplayTimeout = 500 * time.Millisecond
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}, st, opts)
	runSource(t, ctx, src)
	applyOldEngine(t, e, src)
	e.mu.Lock()
	e.answer = func(uint64, map[uint64][]byte) ([]uint64, bool) { return nil, false } // silent
	e.mu.Unlock()
	e.send([]byte("kv-events"), be64(3), storedAt(2003, 903, 506))
	waitFor(t, "the new engine's batch", func() bool { s := src.Stats(); return s.Resets == 1 && s.LastSeq == 3 })
	if s := src.Stats(); s.Errors[ReasonReplay] != 1 {
		t.Errorf("%d replay errors for one restart (requests %v), want 1", s.Errors[ReasonReplay], e.replayRequests())
	}
}

// A replayed batch that shows a restart is counted once among the
// replayed ones (found by review: applying it went through the counting
// again).
func TestRestartReplayedBatchCountedOnce(t *testing.T) {
	ctx := t.Context()
	src := oldEngineApplied(t, 5)
	if err := src.deliver(ctx, 5, storedAt(2005, 905, 510), true); err != nil {
		t.Fatal(err)
	}
	if s := src.Stats(); s.ReplayedBatches != 1 || s.Resets != 1 {
		t.Errorf("replayed batches %d, resets %d; want 1 and 1", s.ReplayedBatches, s.Resets)
	}
}

// The same bytes are a duplicate: a map repeating "ts" is read the same
// way by the restart check and by Decode (the last one), so the batch
// again is no restart (found by review).
func TestRepeatedTSKeyIsNoRestart(t *testing.T) {
	ctx := t.Context()
	src := oldEngineApplied(t, 4)
	p := newMP().mapl(3).str("ts").f(3000).str("events").arr(0).str("ts").f(1005).bytes()
	for _, replayed := range []bool{false, true} {
		if err := src.deliver(ctx, 5, p, replayed); err != nil {
			t.Fatal(err)
		}
	}
	if s := src.Stats(); s.Resets != 0 || s.Clears != 0 {
		t.Errorf("the same batch again taken for a restart: resets %d, clears %d", s.Resets, s.Clears)
	}
}

// An engine that restarted while kvidx was away and has not reached the
// last sequence applied, then went idle: the replay asked from that
// sequence comes back empty (the engine that published it would have sent
// it back). The old engine's blocks were held, and the new engine's
// missing, until its next live batch; now the worker is cleared and the
// new engine's batches are replayed from 0, or, when it has none, the
// clear is applied alone.
func TestEngineRestartBelowTheLastSequenceIdle(t *testing.T) {
	for _, tc := range []struct {
		name string
		last int // the restarted engine's last batch; -1: none yet
	}{
		{"new batches", 2},
		{"no batch yet", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			e, st, spec, held := appliedThenAway(t, ctx)

			e.mu.Lock()
			e.buf = map[uint64][]byte{}
			e.mu.Unlock()
			if tc.last >= 0 {
				restartEngine(e, uint64(tc.last))
			}
			src := NewZMQSource(spec, st, testOptions())
			runSource(t, ctx, src)
			// The clear comes with the first replayed batch: wait for the
			// last one too (checked at the clear alone, batches 1 and 2
			// were at times not applied yet).
			waitFor(t, "the restart", func() bool {
				s := src.Stats()
				return s.Resets == 1 && s.Clears == 1 && (tc.last < 0 || s.HasSeq && s.LastSeq == uint64(tc.last))
			})
			for seq := uint64(0); seq <= 5; seq++ {
				if held(10 + 2*seq) {
					t.Errorf("the old engine's block of batch %d is still held", seq)
				}
			}
			for seq := 0; seq <= tc.last; seq++ {
				if !held(500 + 2*uint64(seq)) {
					t.Errorf("the new engine's block of batch %d is missing", seq)
				}
			}
			// The new engine's next batch, live: applied, with no second
			// clear of the worker already cleared.
			next := uint64(tc.last + 1)
			p := storedAt(3000, 950+next, 500+2*next)
			e.mu.Lock()
			e.buf[next] = p
			e.mu.Unlock()
			sendUntil(t, e, next, p, "the new engine's next batch", func() bool { s := src.Stats(); return s.HasSeq && s.LastSeq == next })
			if !held(500 + 2*next) {
				t.Errorf("the new engine's block of batch %d is missing", next)
			}
			if s := src.Stats(); s.Resets != 1 || s.Clears != 1 {
				t.Errorf("%d resets and %d clears, want one each", s.Resets, s.Clears)
			}
		})
	}
}

// A restarted engine's sequence 0 lost live (published before the SUB
// reconnected) is told by the ts of its next batch, at or below the last
// sequence applied but made later: the worker is cleared. Only batches
// without a ts leave that restart unseen, dropped as duplicates (the known
// limit ingest's docs state; they stated it for every engine).
func TestLostSequenceZeroToldByTS(t *testing.T) {
	noTS := newMP().arr(3).null().arr(1).arr(5).str("BlockStored").us(901).null().us(502, 503).u(2).u(0).bytes()
	for _, tc := range []struct {
		name    string
		payload []byte
		restart bool
	}{
		{"with ts", storedAt(2001, 901, 502), true},
		{"without ts", noTS, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := oldEngineApplied(t, 5)
			if err := src.deliver(t.Context(), 1, tc.payload, false); err != nil {
				t.Fatal(err)
			}
			s := src.Stats()
			if got := s.Resets == 1 && s.Clears == 1; got != tc.restart {
				t.Errorf("resets %d, clears %d, duplicates %d; restart seen %v, want %v", s.Resets, s.Clears, s.Duplicates, got, tc.restart)
			}
			if !tc.restart && s.Duplicates != 1 {
				t.Errorf("duplicates %d, want 1", s.Duplicates)
			}
		})
	}
}
