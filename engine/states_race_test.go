package engine

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMatchAgainstStatesPassedThrough runs queries and snapshots while
// events apply, compactions among them, and checks every answer against
// the states the index passed through while the query ran (the model's
// state after every block of a Stored event, and after every event): a
// worker scoring k held each of positions 0..k-1 in one of those states,
// and in one of them scored at most k. A frozen copy, loaded, equals the
// state after the events it counts.
func TestMatchAgainstStatesPassedThrough(t *testing.T) {
	var workers []WorkerKey
	for i := range 12 {
		workers = append(workers, WorkerKey{WorkerID: uint64(i / 2), DPRank: uint32(i % 2)})
	}
	rng := rand.New(rand.NewPCG(7, 8))
	const qlen = 6
	var queries, qseqs [][]uint64
	for range 6 {
		q := make([]uint64, qlen)
		for i := range q {
			q[i] = 1 + rng.Uint64N(3)
		}
		queries, qseqs = append(queries, q), append(qseqs, SeqHashes(nil, q))
	}
	const salt = 1 << 60
	n := 10000
	if raceEnabled {
		n = 2500
	}
	var events []Event
	for len(events) < n {
		w := workers[rng.IntN(len(workers))]
		qi := rng.IntN(len(queries))
		q, seqs := queries[qi], qseqs[qi]
		hash := func(i int) uint64 {
			switch rng.IntN(20) {
			case 0:
				return seqs[i] ^ salt // one place under two block hashes
			case 1:
				return 1 + rng.Uint64N(12) // moves between places
			}
			return seqs[i]
		}
		switch k := rng.IntN(100); {
		case k < 2:
			st := chain(filler, nil, fillerChain()...)
			events = append(events, st)
			switch rng.IntN(3) {
			case 0:
				events = append(events, Event{Worker: filler, Kind: KindCleared})
			case 1:
				events = append(events, Event{Worker: filler, Kind: KindWorkerRemoved})
			default:
				r := removed(filler, st)
				if rng.IntN(2) == 0 {
					slices.Reverse(r.BlockHashes)
				}
				events = append(events, r)
			}
		case k < 55:
			ev := Event{Worker: w, Kind: KindStored}
			from := rng.IntN(qlen)
			to := from + 1 + rng.IntN(qlen-from)
			switch rng.IntN(10) {
			case 0, 1, 2:
				from = 0
			case 3:
				ev.HasStartPosition, ev.StartPosition = true, uint64(from)
			default:
				if from > 0 {
					ev.HasParent, ev.ParentHash = true, seqs[from-1]
					if rng.IntN(6) == 0 {
						ev.ParentHash ^= salt
					}
				} else {
					to = max(to, 2)
				}
			}
			seen := map[uint64]bool{ev.ParentHash: ev.HasParent}
			for i := from; i < to; i++ {
				bh := hash(i)
				if seen[bh] {
					break // a hash repeated in an event would pass through a place no state holds
				}
				seen[bh] = true
				ev.Blocks = append(ev.Blocks, Block{BlockHash: bh, TokensHash: q[i]})
			}
			if len(ev.Blocks) > 0 {
				events = append(events, ev)
			}
		case k < 88:
			ev := Event{Worker: w, Kind: KindRemoved}
			for range 1 + rng.IntN(4) {
				ev.BlockHashes = append(ev.BlockHashes, hash(rng.IntN(qlen)))
			}
			events = append(events, ev)
		case k < 97:
			events = append(events, Event{Worker: w, Kind: KindCleared})
		default:
			events = append(events, Event{Worker: w, Kind: KindWorkerRemoved})
		}
	}

	// states[s][q][w]: the positions of query q that worker w holds.
	type state [][]uint64
	ix0, ref := New(), newModel()
	var (
		mu       sync.RWMutex
		states   []state
		afterEv  []int // state index after each event
		lo, hi   atomic.Int64
		finished atomic.Bool
	)
	record := func() {
		st := make(state, len(queries))
		for qi, q := range queries {
			st[qi] = make([]uint64, len(workers))
			for wi, w := range workers {
				for i := range q {
					if ref.entries[mkey{uint32(i), q[i]}][qseqs[qi][i]][w] > 0 {
						st[qi][wi] |= 1 << i
					}
				}
			}
		}
		mu.Lock()
		states = append(states, st)
		mu.Unlock()
	}
	// Many workers hold every query's chain throughout: probes take a while,
	// so that events apply while a query runs.
	const statics = 1000
	for i := range statics {
		for _, q := range queries {
			ev := chain(WorkerKey{WorkerID: 1000 + uint64(i)}, nil, q...)
			if err := ix0.Apply(&ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	record()
	afterEv = append(afterEv, 0)
	scoreOfMask := func(m uint64) int { return bits.TrailingZeros64(^m) }
	widx := func(k WorkerKey) int { return slices.Index(workers, k) }

	check := func(qi int, got []Score, from, to int) {
		mu.RLock()
		window := states[from : to+1]
		mu.RUnlock()
		scores := make([]int, len(workers))
		for _, s := range got {
			wi := widx(s.Worker)
			if s.Worker.WorkerID >= 1000 && s.Worker.WorkerID < 1000+statics {
				if s.MatchedBlocks != qlen {
					t.Errorf("query %d: worker %v, holding it throughout, scored %d", qi, s.Worker, s.MatchedBlocks)
				}
				continue
			}
			if wi < 0 {
				t.Errorf("query %d: worker %v scored %d, it never holds a query block", qi, s.Worker, s.MatchedBlocks)
				return
			}
			scores[wi] = s.MatchedBlocks
		}
		for wi := range workers {
			var held uint64
			low := qlen + 1
			for _, st := range window {
				held |= st[qi][wi]
				low = min(low, scoreOfMask(st[qi][wi]))
			}
			k := scores[wi]
			if k > 0 && held&(1<<k-1) != 1<<k-1 {
				t.Errorf("query %d (states %d..%d): worker %v scored %d; held positions %b", qi, from, to, workers[wi], k, held)
			}
			if low > k {
				t.Errorf("query %d (states %d..%d): worker %v scored %d, scored at least %d in every state", qi, from, to, workers[wi], k, low)
			}
		}
	}

	// The model's states are computed first, so that events apply at the
	// index's own pace while queries run.
	errs := make([]error, len(events))
	for i := range events {
		ev := &events[i]
		if ev.Worker != filler {
			ref.step = record
		}
		errs[i] = ref.Apply(ev)
		ref.step = nil
		record()
		afterEv = append(afterEv, len(states)-1)
	}
	var overlapped atomic.Int64

	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			for i := r; !finished.Load() && !t.Failed(); i++ {
				qi := i % len(queries)
				from := int(lo.Load())
				got := ix0.Match(queries[qi], nil)
				to := int(hi.Load())
				if to > from {
					overlapped.Add(1)
				}
				check(qi, got, from, to)
			}
		})
	}
	wg.Go(func() {
		for !finished.Load() && !t.Failed() {
			time.Sleep(20 * time.Millisecond)
			f := ix0.Freeze()
			c := f.Stats().Counters
			n := int(c.EventsStored+c.EventsRemoved+c.EventsCleared+c.EventsWorkerRemoved+c.ParentNotFound+c.InvalidSequence+c.InvalidEvent+c.TooManyWorkers) - statics*len(queries)
			got := load(t, f)
			f.Release(ix0)
			if err := got.Verify(); err != nil {
				t.Errorf("loaded after %d events: %v", n, err)
				return
			}
			mu.RLock()
			st := states[afterEv[n]]
			mu.RUnlock()
			for qi, q := range queries {
				var want []Score
				for wi, w := range workers {
					if k := scoreOfMask(st[qi][wi]); k > 0 {
						want = append(want, Score{Worker: w, MatchedBlocks: k})
					}
				}
				for i := range statics {
					want = append(want, Score{Worker: WorkerKey{WorkerID: 1000 + uint64(i)}, MatchedBlocks: qlen})
				}
				SortScores(want)
				if res := got.Match(q, nil); !slices.Equal(res, want) && !(len(res) == 0 && len(want) == 0) {
					t.Errorf("loaded after %d events, query %d: %v, want %v", n, qi, res, want)
					return
				}
			}
		}
	})
	compactions := 0
	for i := range events {
		ev := &events[i]
		before := ix0.shards[0].nextNew
		hi.Store(int64(afterEv[i+1]))
		if err := ix0.Apply(ev); RejectReason(err) != RejectReason(errs[i]) {
			t.Errorf("event %d: index error %v, model error %v", i, err, errs[i])
		}
		lo.Store(int64(afterEv[i+1]))
		if ix0.shards[0].nextNew < before {
			compactions++
		}
		if t.Failed() {
			break
		}
	}
	finished.Store(true)
	wg.Wait()
	if err := ix0.Verify(); err != nil {
		t.Fatal(err)
	}
	if compactions == 0 {
		t.Fatal("no compaction ran")
	}
	t.Logf("%d events, %d states, %d compactions, %d queries overlapped events", len(events), len(states), compactions, overlapped.Load())
}
