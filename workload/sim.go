package workload

import (
	"fmt"

	"github.com/kvidx/kvidx/engine"
)

// Simulator is the simulated fleet and its router: W workers with an LRU cache
// of C blocks each, and the load window of the last W routing decisions. It
// does not hold an index: the caller scores requests with its own
// [engine.Index], passes the scores to [Simulator.Route], and applies what
// [Simulator.Serve] returns. Not safe for concurrent use.
type Simulator struct {
	cfg Config

	caches  []*lru   // per worker, created on first use
	eventID []uint64 // per worker: the last event id it emitted

	// Routing.
	score  []int    // per worker: the current request's index score (scratch, all 0 between calls)
	load   []int64  // per worker: blocks routed to it among the last W requests
	window []routed // ring of the last W routing decisions
	next   int      // next ring slot to write
	filled bool     // whether the ring has wrapped

	// Event buffers reused by Serve.
	events  []engine.Event
	blocks  []engine.Block
	removed []uint64
	miss    []bool

	hitBlocks, reqBlocks int64
}

type routed struct {
	worker int
	blocks int64
}

// NewSimulator returns a fleet of cfg.Workers empty caches.
func NewSimulator(cfg Config) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("workload config: %w", err)
	}
	return &Simulator{
		cfg:     cfg,
		caches:  make([]*lru, cfg.Workers),
		eventID: make([]uint64, cfg.Workers),
		score:   make([]int, cfg.Workers),
		load:    make([]int64, cfg.Workers),
		window:  make([]routed, cfg.Workers),
	}, nil
}

// Config returns the simulator's config.
func (s *Simulator) Config() Config { return s.cfg }

// Route picks the worker for a request of the given block count from its index
// scores (as returned by [engine.Index.Match]; scores of unknown worker keys
// are ignored): the lowest (blocks - score) + load, ties to the lowest worker
// id, load being the blocks routed to that worker among the last W requests.
// It records the decision in the load window and the hit-rate totals, and
// returns the worker and its score.
func (s *Simulator) Route(blocks int, scores []engine.Score) (worker, matched int) {
	w := len(s.score)
	for _, sc := range scores {
		if sc.Worker.DPRank == 0 && sc.Worker.WorkerID < uint64(w) {
			s.score[sc.Worker.WorkerID] = sc.MatchedBlocks
		}
	}
	best, bestCost := 0, int64(0)
	for i := range w {
		c := int64(blocks-s.score[i]) + s.load[i]
		if i == 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	matched = s.score[best]
	for _, sc := range scores {
		if sc.Worker.DPRank == 0 && sc.Worker.WorkerID < uint64(w) {
			s.score[sc.Worker.WorkerID] = 0
		}
	}

	if s.filled {
		old := s.window[s.next]
		s.load[old.worker] -= int64(old.blocks)
	}
	s.window[s.next] = routed{worker: best, blocks: int64(blocks)}
	s.load[best] += int64(blocks)
	if s.next++; s.next == len(s.window) {
		s.next, s.filled = 0, true
	}

	s.hitBlocks += int64(matched)
	s.reqBlocks += int64(blocks)
	return best, matched
}

// Serve runs req on worker (0..W-1, as returned by Route): it touches the
// request's blocks from last to first, then returns the worker's events: one
// Stored event per run of blocks it was missing, in position order (parent =
// the block before the run), then one Removed event for the least recently
// used blocks beyond the capacity, if any. The returned events and their slices are reused by the next Serve:
// copy them ([CloneEvents]) to keep them.
func (s *Simulator) Serve(worker int, req *Request) []engine.Event {
	c := s.caches[worker]
	if c == nil {
		c = newLRU(s.cfg.Capacity)
		s.caches[worker] = c
	}
	n := len(req.BlockHashes)
	if cap(s.miss) < n {
		s.miss = make([]bool, n)
		s.blocks = make([]engine.Block, n)
	}
	miss := s.miss[:n]
	for i := n - 1; i >= 0; i-- {
		miss[i] = !c.touch(req.BlockHashes[i])
	}

	key := engine.WorkerKey{WorkerID: uint64(worker)}
	events := s.events[:0]
	blocks := s.blocks[:n]
	for i := 0; i < n; {
		if !miss[i] {
			i++
			continue
		}
		start := i
		for ; i < n && miss[i]; i++ {
			blocks[i] = engine.Block{BlockHash: req.BlockHashes[i], TokensHash: req.TokensHashes[i]}
		}
		s.eventID[worker]++
		ev := engine.Event{Worker: key, EventID: s.eventID[worker], Kind: engine.KindStored, Blocks: blocks[start:i:i]}
		if start > 0 {
			ev.HasParent, ev.ParentHash = true, req.BlockHashes[start-1]
		}
		events = append(events, ev)
	}

	if c.len() > s.cfg.Capacity {
		removed := s.removed[:0]
		for c.len() > s.cfg.Capacity {
			removed = append(removed, c.evictOldest())
		}
		s.removed = removed
		s.eventID[worker]++
		events = append(events, engine.Event{Worker: key, EventID: s.eventID[worker], Kind: engine.KindRemoved, BlockHashes: removed})
	}
	s.events = events
	return events
}

// HitRate returns the prefix hit rate of the requests routed so far: the sum
// of the chosen workers' scores over the sum of the requests' blocks (0 before
// any request).
func (s *Simulator) HitRate() float64 {
	if s.reqBlocks == 0 {
		return 0
	}
	return float64(s.hitBlocks) / float64(s.reqBlocks)
}

// CachedBlocks returns the number of blocks the fleet's caches hold, which is
// the index's holder-block count when every event was applied.
func (s *Simulator) CachedBlocks() int {
	n := 0
	for _, c := range s.caches {
		if c != nil {
			n += c.len()
		}
	}
	return n
}

// BlockOps returns the block operations of events: blocks of Stored events
// plus hashes of Removed events.
func BlockOps(events []engine.Event) int {
	n := 0
	for i := range events {
		n += len(events[i].Blocks) + len(events[i].BlockHashes)
	}
	return n
}

// CloneEvents returns a deep copy of events, sharing no slice with them.
func CloneEvents(events []engine.Event) []engine.Event {
	out := make([]engine.Event, len(events))
	for i, ev := range events {
		if ev.Blocks != nil {
			ev.Blocks = append([]engine.Block(nil), ev.Blocks...)
		}
		if ev.BlockHashes != nil {
			ev.BlockHashes = append([]uint64(nil), ev.BlockHashes...)
		}
		out[i] = ev
	}
	return out
}
