package ingest

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// fakeStore records every appended batch.
type fakeStore struct {
	mu      sync.Mutex
	batches []fakeBatch
	pos     []wal.Position
	fail    int // refuse this many appends first
}

type fakeBatch struct {
	events []engine.Event
	seq    uint64
}

func (f *fakeStore) Append(_ context.Context, events []engine.Event, positions []wal.Position) (uint64, []error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return 0, nil, wal.ErrOverloaded
	}
	if len(positions) == 0 {
		panic("want the source's position first")
	}
	// The source's own position comes first, then those recording DP ranks.
	f.batches = append(f.batches, fakeBatch{slices.Clone(events), positions[0].Seq})
	f.pos = mergePositions(f.pos, positions)
	return uint64(len(f.batches)), nil, nil
}

func (f *fakeStore) Applied() (uint64, []wal.Position) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return uint64(len(f.batches)), slices.Clone(f.pos)
}

func (f *fakeStore) snapshot() []fakeBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

func (f *fakeStore) seqs() []uint64 {
	var s []uint64
	for _, b := range f.snapshot() {
		s = append(s, b.seq)
	}
	return s
}

// batchPayload is a vLLM batch with one BlockStored event of one block
// whose engine hash is 1000+seq (parent 1000+seq-1 when seq > 0), on DP rank 1.
func batchPayload(seq uint64) []byte {
	m := newMP().arr(3).f(float64(seq)).arr(1).arr(5).str("BlockStored").us(1000 + seq)
	if seq == 0 {
		m.null()
	} else {
		m.u(1000 + seq - 1)
	}
	return m.us(seq, seq+1).u(2).u(1).bytes()
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// fakeEngine is a vLLM engine's publisher: a PUB socket and a replay
// ROUTER keeping every published batch.
type fakeEngine struct {
	t      *testing.T
	ctx    context.Context
	pub    zmq4.Socket
	router zmq4.Socket
	pubEP  string
	repEP  string
	topic  bool // replies carry the topic frame (newer engines)

	mu       sync.Mutex
	buf      map[uint64][]byte
	minSeq   uint64 // the replay buffer starts here
	requests []uint64
	// answer, when set, scripts the replay: the batches sent for a request
	// from start, and whether the end marker follows.
	answer func(start uint64, buf map[uint64][]byte) (seqs []uint64, end bool)
	delay  time.Duration // before each replayed batch
	// reqSeen receives each replay request's start (when there is room).
	reqSeen chan uint64
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newFakeEngine(t *testing.T, ctx context.Context) *fakeEngine {
	e := &fakeEngine{t: t, ctx: ctx, buf: map[uint64][]byte{}, reqSeen: make(chan uint64, 100)}
	zl := slog.NewLogLogger(quietLogger().Handler(), slog.LevelDebug)
	e.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zl))
	if err := e.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	e.pubEP = "tcp://" + e.pub.Addr().String()
	e.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zl))
	if err := e.router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	e.repEP = "tcp://" + e.router.Addr().String()
	t.Cleanup(func() { e.pub.Close(); e.router.Close() })
	go e.serveReplay()
	return e
}

func (e *fakeEngine) serveReplay() {
	for {
		m, err := e.router.Recv()
		if err != nil {
			return
		}
		if len(m.Frames) != 3 || len(m.Frames[1]) != 0 || len(m.Frames[2]) != 8 {
			e.t.Errorf("replay request %v", m.Frames)
			continue
		}
		id, start := m.Frames[0], binary.BigEndian.Uint64(m.Frames[2])
		e.mu.Lock()
		e.requests = append(e.requests, start)
		var seqs []uint64
		end := true
		if e.answer != nil {
			seqs, end = e.answer(start, e.buf)
		} else {
			for s := range e.buf {
				if s >= start && s >= e.minSeq {
					seqs = append(seqs, s)
				}
			}
			slices.Sort(seqs)
		}
		var replies []zmq4.Msg
		for _, s := range seqs {
			replies = append(replies, e.reply(id, be64(s), e.buf[s]))
		}
		delay := e.delay
		e.mu.Unlock()
		select {
		case e.reqSeen <- start:
		default:
		}
		if end {
			replies = append(replies, e.reply(id, be64(math.MaxUint64), nil))
		}
		for i, r := range replies {
			if i < len(seqs) {
				time.Sleep(delay)
			}
			if err := e.router.SendMulti(r); err != nil {
				break // the requester went away; serve the next one
			}
		}
	}
}

func (e *fakeEngine) reply(id, seq, payload []byte) zmq4.Msg {
	if e.topic {
		return zmq4.NewMsgFrom(id, []byte{}, []byte("kv-events"), seq, payload)
	}
	return zmq4.NewMsgFrom(id, []byte{}, seq, payload)
}

// publish records batch seq for replay and, if live, publishes it.
func (e *fakeEngine) publish(seq uint64, live bool) {
	p := batchPayload(seq)
	e.mu.Lock()
	e.buf[seq] = p
	e.mu.Unlock()
	if live {
		e.send([]byte("kv-events"), be64(seq), p)
	}
}

func (e *fakeEngine) send(frames ...[]byte) {
	if err := e.pub.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *fakeEngine) replayRequests() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.requests)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testOptions() ZMQOptions {
	return ZMQOptions{Logger: quietLogger(), MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		ReplayTimeout: 5 * time.Second, DialTimeout: time.Second}
}

// runSource runs src until the test ends and checks it stops cleanly.
func runSource(t *testing.T, ctx context.Context, src *ZMQSource) {
	t.Cleanup(runUntilCancelled(t, ctx, src))
}

// publishUntilApplied republishes batch seq until the store holds it:
// the PUB socket drops messages sent before the subscription arrives.
func publishUntilApplied(t *testing.T, e *fakeEngine, st *fakeStore, seq uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("batch %d applied", seq), func() bool {
		if slices.Contains(st.seqs(), seq) {
			return true
		}
		e.publish(seq, true)
		time.Sleep(20 * time.Millisecond)
		return false
	})
}

func checkSeqs(t *testing.T, st *fakeStore, want []uint64) {
	t.Helper()
	if got := st.seqs(); !slices.Equal(got, want) {
		t.Fatalf("store got batches %v, want %v", got, want)
	}
}

func checkChain(t *testing.T, st *fakeStore) {
	t.Helper()
	for _, b := range st.snapshot() {
		ev := b.events[len(b.events)-1]
		if ev.Kind != engine.KindStored || ev.Blocks[0].BlockHash != 1000+b.seq || ev.Worker != (engine.WorkerKey{WorkerID: 7, DPRank: 1}) {
			t.Fatalf("batch %d: event %+v", b.seq, ev)
		}
	}
}

func TestZMQGapReplay(t *testing.T) {
	for _, topic := range []bool{false, true} {
		t.Run(fmt.Sprintf("topic=%v", topic), func(t *testing.T) {
			ctx := t.Context()
			e := newFakeEngine(t, ctx)
			e.topic = topic
			st := &fakeStore{}
			src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}, st, testOptions())
			runSource(t, ctx, src)
			waitFor(t, "connected", func() bool { return src.Stats().Connected })
			publishUntilApplied(t, e, st, 0)
			for seq := uint64(1); seq < 10; seq++ {
				e.publish(seq, seq != 4 && seq != 5) // a deliberate gap
			}
			waitFor(t, "batch 9", func() bool { return src.Stats().LastSeq == 9 })
			e.publish(9, true) // a late duplicate
			e.publish(10, true)
			waitFor(t, "batch 10", func() bool { return src.Stats().LastSeq == 10 })
			want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
			checkSeqs(t, st, want)
			checkChain(t, st)
			s := src.Stats()
			// From 3, the last applied: the batches carry a ts (see
			// replayFrom).
			if !slices.Contains(e.replayRequests(), 3) || s.Clears != 0 || s.Lag != 0 || s.Batches != 11 {
				t.Fatalf("replay requests %v, stats %+v", e.replayRequests(), s)
			}
			if r := e.replayRequests(); r[0] != 0 {
				t.Fatalf("first replay request from %d, want 0", r[0])
			}
		})
	}
}

func TestZMQResume(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	for seq := range uint64(10) {
		e.publish(seq, false)
	}
	st := &fakeStore{pos: []wal.Position{{Source: "zmq:other", Seq: 99}, {Source: SourceName(e.pubEP), Seq: 5}}}
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}, st, testOptions())
	runSource(t, ctx, src)
	waitFor(t, "batch 9", func() bool { return src.Stats().LastSeq == 9 })
	waitFor(t, "connected", func() bool { return src.Stats().Connected })
	// Live batches the replay already delivered are dropped.
	for seq := uint64(3); seq < 10; seq++ {
		e.publish(seq, true)
	}
	publishUntilApplied(t, e, st, 10)
	checkSeqs(t, st, []uint64{6, 7, 8, 9, 10})
	checkChain(t, st)
	if r := e.replayRequests(); len(r) != 1 || r[0] != 6 {
		t.Fatalf("replay requests %v, want [6]", r)
	}
}

// TestZMQReplayMovedOn: the engine's buffer no longer holds the batches
// after the recorded position: the worker is cleared before the first
// replayed batch.
func TestZMQReplayMovedOn(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	e.minSeq = 5
	for seq := range uint64(8) {
		e.publish(seq, false)
	}
	// The batches applied up to 2 were on rank 1, which the WAL records.
	st := &fakeStore{pos: []wal.Position{{Source: SourceName(e.pubEP), Seq: 2}, {Source: SourceName(e.pubEP) + rankMark + "1", Seq: 1}}}
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}, st, testOptions())
	runSource(t, ctx, src)
	waitFor(t, "batch 7", func() bool { return src.Stats().LastSeq == 7 })
	checkSeqs(t, st, []uint64{5, 6, 7})
	b := st.snapshot()[0]
	if len(b.events) != 2 || b.events[0].Kind != engine.KindCleared || b.events[0].Worker != (engine.WorkerKey{WorkerID: 7, DPRank: 1}) {
		t.Fatalf("first batch %+v, want a clear first", b.events)
	}
	if s := src.Stats(); s.Clears != 1 || s.Errors[ReasonGap] != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestZMQPublisherRestart: the publisher goes away and comes back on the
// same address with its sequence reset: the source reconnects and clears
// the worker before applying the new sequence 0.
func TestZMQPublisherRestart(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	st := &fakeStore{}
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7}, st, testOptions())
	runSource(t, ctx, src)
	publishUntilApplied(t, e, st, 0)
	e.publish(1, true)
	e.publish(2, true)
	waitFor(t, "batch 2", func() bool { return src.Stats().LastSeq == 2 })

	addr := e.pub.Addr().String()
	e.pub.Close()
	waitFor(t, "disconnected", func() bool { return !src.Stats().Connected })
	e.pub = zmq4.NewPub(ctx, zmq4.WithLogger(slog.NewLogLogger(quietLogger().Handler(), slog.LevelDebug)))
	waitFor(t, "listen again", func() bool { return e.pub.Listen("tcp://"+addr) == nil })
	waitFor(t, "reconnected", func() bool { return src.Stats().Connected })
	e.buf = map[uint64][]byte{}
	waitFor(t, "reset applied", func() bool {
		if src.Stats().Resets == 1 {
			return true
		}
		e.publish(0, true)
		time.Sleep(20 * time.Millisecond)
		return false
	})
	e.publish(1, true)
	waitFor(t, "batch 1 after the reset", func() bool { return len(st.seqs()) == 5 })
	checkSeqs(t, st, []uint64{0, 1, 2, 0, 1})
	b := st.snapshot()[3]
	if len(b.events) != 2 || b.events[0].Kind != engine.KindCleared || b.events[0].Worker != (engine.WorkerKey{WorkerID: 7, DPRank: 1}) {
		t.Fatalf("reset batch %+v, want a clear first", b.events)
	}
	if s := src.Stats(); s.Errors[ReasonDisconnect] == 0 || s.Clears != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestZMQHandle drives the sequencing logic directly, without sockets.
func TestZMQHandle(t *testing.T) {
	ctx := t.Context()
	st := &fakeStore{fail: 2}
	var mu sync.Mutex
	reasons := map[string]int{}
	opts := testOptions()
	opts.OnError = func(source, reason string) {
		mu.Lock()
		reasons[reason]++
		mu.Unlock()
		if source != "zmq:tcp://x:1" {
			t.Errorf("source %q", source)
		}
	}
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://x:1", WorkerID: 7}, st, opts)
	msg := func(seq uint64, payload []byte) [][]byte { return [][]byte{[]byte("t"), be64(seq), payload} }
	steps := [][][]byte{
		msg(0, batchPayload(0)), // applied after two refused appends
		msg(1, batchPayload(1)),
		{[]byte("t"), be64(2)},                       // wrong frame count
		{[]byte("t"), []byte{1, 2}, batchPayload(2)}, // bad sequence frame
		msg(2, []byte{0x93, 0xc1}),                   // undecodable: clear and skip
		msg(3, batchPayload(3)),
		msg(3, batchPayload(3)), // duplicate
		msg(1, batchPayload(1)), // duplicate
		msg(6, batchPayload(6)), // gap without replay: clear first
		msg(0, batchPayload(0)), // engine restart: clear first
		msg(1, batchPayload(1)),
	}
	for _, m := range steps {
		if err := src.handle(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	checkSeqs(t, st, []uint64{0, 1, 2, 3, 6, 0, 1})
	bs := st.snapshot()
	clearKey := engine.WorkerKey{WorkerID: 7, DPRank: 1}
	for _, i := range []int{2, 4, 5} {
		if bs[i].events[0].Kind != engine.KindCleared || bs[i].events[0].Worker != clearKey {
			t.Fatalf("batch %d: %+v, want a clear first", i, bs[i].events)
		}
	}
	if len(bs[2].events) != 1 {
		t.Fatalf("undecodable batch: %+v", bs[2].events)
	}
	s := src.Stats()
	want := map[string]uint64{ReasonAppend: 2, ReasonFrames: 1, ReasonSeq: 1, ReasonDecode: 1, ReasonGap: 1}
	mu.Lock()
	defer mu.Unlock()
	for r, n := range want {
		if s.Errors[r] != n || uint64(reasons[r]) != n {
			t.Errorf("errors[%s] = %d (callback %d), want %d", r, s.Errors[r], reasons[r], n)
		}
	}
	if s.Resets != 1 || s.Clears != 3 || s.Duplicates != 2 || s.LastSeq != 1 || s.Batches != 7 {
		t.Fatalf("stats %+v", s)
	}
}

// mergePositions sets each of ps in dst, replacing the position of the same
// source, as a store records the positions of an entry.
func mergePositions(dst, ps []wal.Position) []wal.Position {
next:
	for _, p := range ps {
		for i := range dst {
			if dst[i].Source == p.Source {
				dst[i] = p
				continue next
			}
		}
		dst = append(dst, p)
	}
	return dst
}

// A source reports the sequence its store recorded applied from the
// start, before Run: kvidx serve runs its sources only once a start's
// clears have landed, and meanwhile one that had applied batch 5 showed
// none. A sequence voided by "#reset" (a changed worker id) is none.
func TestZMQStatsBeforeRun(t *testing.T) {
	name := SourceName("tcp://127.0.0.1:19557")
	for _, tc := range []struct {
		name string
		pos  []wal.Position
		has  bool
		last uint64
	}{
		{"none recorded", []wal.Position{{Source: "zmq:other", Seq: 9}}, false, 0},
		{"recorded", []wal.Position{{Source: name, Seq: 5}, {Source: name + tsMark, Seq: 7}}, true, 5},
		{"voided", []wal.Position{{Source: name, Seq: 5}, {Source: name + resetMark, Seq: 1}}, false, 0},
		{"reset cleared", []wal.Position{{Source: name, Seq: 6}, {Source: name + resetMark, Seq: 0}}, true, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := NewZMQSource(ZMQSpec{Endpoint: "tcp://127.0.0.1:19557", WorkerID: 7}, &fakeStore{pos: tc.pos}, testOptions())
			if s := src.Stats(); s.HasSeq != tc.has || s.LastSeq != tc.last {
				t.Fatalf("stats before Run: has %v last %d, want %v %d", s.HasSeq, s.LastSeq, tc.has, tc.last)
			}
		})
	}
}
