package ingest

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

// startScripted runs a source on e and waits until it applied batch 0.
func startScripted(t *testing.T, e *fakeEngine, st *fakeStore, replay string, opts ZMQOptions) *ZMQSource {
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: replay}, st, opts)
	runSource(t, t.Context(), src)
	waitFor(t, "connected", func() bool { return src.Stats().Connected })
	publishUntilApplied(t, e, st, 0)
	return src
}

func startsWithClear(b fakeBatch) bool {
	return len(b.events) > 0 && b.events[0].Kind == engine.KindCleared
}

// A replay that ends early: the batches it gave are applied, the rest is a gap.
func TestZMQLivePartialReplay(t *testing.T) {
	e := newFakeEngine(t, t.Context())
	st := &fakeStore{}
	src := startScripted(t, e, st, e.repEP, testOptions())
	for s := uint64(1); s <= 3; s++ {
		e.publish(s, true)
	}
	waitFor(t, "3", func() bool { return src.Stats().LastSeq == 3 })
	e.mu.Lock()
	e.answer = func(start uint64, buf map[uint64][]byte) ([]uint64, bool) { return []uint64{4, 5}, true }
	e.mu.Unlock()
	for s := uint64(4); s <= 8; s++ {
		e.publish(s, s == 8)
	}
	waitFor(t, "8", func() bool { return src.Stats().LastSeq == 8 })
	checkSeqs(t, st, []uint64{0, 1, 2, 3, 4, 5, 8})
	bs := st.snapshot()
	if startsWithClear(bs[4]) || startsWithClear(bs[5]) || !startsWithClear(bs[6]) {
		t.Fatalf("clears wrong: %+v", bs[4:])
	}
	s := src.Stats()
	if s.Errors[ReasonGap] != 1 || s.Clears != 1 || s.Lag != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A replay socket that takes the request and never answers: the source
// gives up after ReplayTimeout, clears, and keeps following the stream.
func TestZMQLiveReplaySilent(t *testing.T) {
	e := newFakeEngine(t, t.Context())
	st := &fakeStore{}
	opts := testOptions()
	opts.ReplayTimeout = 300 * time.Millisecond
	src := startScripted(t, e, st, e.repEP, opts)
	e.mu.Lock()
	e.answer = func(uint64, map[uint64][]byte) ([]uint64, bool) { return nil, false }
	e.mu.Unlock()
	e.publish(1, false)
	e.publish(2, true)
	waitFor(t, "2", func() bool { return src.Stats().LastSeq == 2 })
	for s := uint64(3); s <= 20; s++ {
		e.publish(s, true)
	}
	waitFor(t, "20", func() bool { return src.Stats().LastSeq == 20 })
	checkSeqs(t, st, []uint64{0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	if s := src.Stats(); s.Errors[ReasonReplay] == 0 || s.Clears != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A replay endpoint nobody listens on.
func TestZMQLiveReplayDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "tcp://" + ln.Addr().String()
	ln.Close()
	e := newFakeEngine(t, t.Context())
	st := &fakeStore{}
	src := startScripted(t, e, st, dead, testOptions())
	e.publish(1, false)
	e.publish(2, true)
	waitFor(t, "2", func() bool { return src.Stats().LastSeq == 2 })
	checkSeqs(t, st, []uint64{0, 2})
	if !startsWithClear(st.snapshot()[1]) {
		t.Fatal("no clear")
	}
}

// The engine restarts (seq 0 live) while a slow replay is in flight.
func TestZMQLiveRestartDuringReplay(t *testing.T) {
	e := newFakeEngine(t, t.Context())
	st := &fakeStore{}
	src := startScripted(t, e, st, e.repEP, testOptions())
	for s := uint64(1); s <= 3; s++ {
		e.publish(s, true)
	}
	waitFor(t, "3", func() bool { return src.Stats().LastSeq == 3 })
	e.mu.Lock()
	e.delay = 200 * time.Millisecond
	e.mu.Unlock()
	for s := uint64(4); s <= 8; s++ {
		e.publish(s, s == 8)
	}
	// From 3, the last applied: the batches carry a ts (see replayFrom).
	for r := uint64(0); r != 3; {
		select {
		case r = <-e.reqSeen:
		case <-time.After(15 * time.Second):
			t.Fatal("no replay request from 3")
		}
	}
	time.Sleep(300 * time.Millisecond) // batch 4 delivered, 5.. in flight
	// The new engine: seq 0, 1, 2 live while the old replay trickles.
	e.mu.Lock()
	e.buf = map[uint64][]byte{}
	e.mu.Unlock()
	e.publish(0, true)
	e.publish(1, true)
	e.publish(2, true)
	waitFor(t, "reset", func() bool { s := src.Stats(); return s.Resets == 1 && s.LastSeq == 2 })
	got := st.seqs()
	// After the last clear, exactly new 0,1,2.
	bs := st.snapshot()
	i := len(bs) - 3
	if !slices.Equal(got[i:], []uint64{0, 1, 2}) || !startsWithClear(bs[i]) {
		t.Fatalf("seqs %v", got)
	}
	// Everything published is applied: nothing is behind.
	if s := src.Stats(); s.Lag != 0 {
		t.Fatalf("Lag %d (HighestSeq %d, LastSeq %d) with nothing left to apply: the old engine's replayed batches raised the new engine's count",
			s.Lag, s.HighestSeq, s.LastSeq)
	}
}

// kvidx stops (the source's context ends, the store closes) at random
// points of a live stream and starts again: every batch is in the WAL once.
func TestZMQLiveStoreRestart(t *testing.T) {
	e := newFakeEngine(t, t.Context())
	dir := t.TempDir()
	const n = 400
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := uint64(0); s < n; s++ {
			e.publish(s, true)
			time.Sleep(time.Millisecond)
		}
	}()
	var last uint64
	for round := 0; ; round++ {
		st, err := recovery.Open(t.Context(), dir, recovery.Options{Sync: wal.SyncNone, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: e.repEP}, st, testOptions())
		ctx, cancel := context.WithCancel(t.Context())
		ran := make(chan struct{})
		go func() { src.Run(ctx); close(ran) }()
		if round < 6 {
			time.Sleep(time.Duration(30+round*17) * time.Millisecond)
		} else {
			<-done
			// The start replay may have been answered before the last
			// batches were published, and those may have gone out before
			// this round's SUB socket was subscribed (PUB drops them): with
			// no batch after them, no gap would show. Resend the last one
			// (a duplicate once applied) until it is applied.
			waitFor(t, "all", func() bool {
				if src.Stats().LastSeq == n-1 {
					return true
				}
				e.publish(n-1, true)
				time.Sleep(20 * time.Millisecond)
				return false
			})
		}
		cancel()
		<-ran
		last = src.Stats().LastSeq
		if c := st.Index().WorkerBlockCount(engine.WorkerKey{WorkerID: 7, DPRank: 1}); round == 6 && c != n {
			t.Errorf("worker holds %d blocks, want %d", c, n)
		}
		st.Close()
		if round == 6 {
			break
		}
	}
	seen := map[uint64]int{}
	name := SourceName(e.pubEP)
	var order []uint64
	if _, err := wal.Scan(filepath.Join(dir, recovery.WALDirName), 0, 0, func(en wal.Entry) error {
		for _, p := range en.Positions {
			if p.Source == name {
				seen[p.Seq]++
				order = append(order, p.Seq)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for s := uint64(0); s < n; s++ {
		if seen[s] != 1 {
			t.Errorf("seq %d in the WAL %d times", s, seen[s])
		}
	}
	t.Logf("last %d, %d entries", last, len(order))
}

// Malformed live messages on real sockets: counted, the stream goes on, and
// the batch a malformed message stood for is replayed.
func TestZMQLiveMalformedLive(t *testing.T) {
	e := newFakeEngine(t, t.Context())
	st := &fakeStore{}
	src := startScripted(t, e, st, e.repEP, testOptions())
	send := func(f ...[]byte) { e.pub.SendMulti(zmq4.NewMsgFrom(f...)) }
	e.publish(1, false)
	send([]byte("kv"), be64(1))                               // 2 frames
	send([]byte("kv"), be64(1), batchPayload(1), []byte("x")) // 4 frames
	send([]byte("kv"), []byte{0, 1}, batchPayload(1))         // bad seq frame
	e.publish(2, true)
	waitFor(t, "2", func() bool { return src.Stats().LastSeq == 2 })
	e.publish(3, false)
	send([]byte("kv"), be64(3), []byte{0x93, 0xc1}) // undecodable, in sequence
	e.publish(4, true)
	waitFor(t, "4", func() bool { return src.Stats().LastSeq == 4 })
	s := src.Stats()
	t.Logf("seqs %v stats %+v", st.seqs(), s)
	if s.Errors[ReasonFrames] != 2 || s.Errors[ReasonSeq] != 1 || s.Errors[ReasonDecode] != 1 || s.Lag != 0 {
		t.Fatalf("stats %+v", s)
	}
	if !slices.Equal(st.seqs()[:3], []uint64{0, 1, 2}) {
		t.Fatalf("seqs %v", st.seqs())
	}
}
