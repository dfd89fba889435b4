package engine

// model is the reference the index is tested against: the semantics of the
// issue written with plain maps and nothing clever.

import (
	"fmt"
	"slices"
	"sync"
)

type mplace struct {
	pos     uint32
	th, seq uint64
}

type mkey struct {
	pos uint32
	th  uint64
}

type model struct {
	mu       sync.RWMutex
	entries  map[mkey]map[uint64]map[WorkerKey]int
	rev      map[WorkerKey]map[uint64]mplace
	counters Counters
	// step, when set, is called after each block of a Stored event is
	// applied (under mu): the states an event passes through.
	step func()
}

func newModel() *model {
	return &model{entries: map[mkey]map[uint64]map[WorkerKey]int{}, rev: map[WorkerKey]map[uint64]mplace{}}
}

// Apply applies one event.
func (ix *model) Apply(ev *Event) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	c := &ix.counters
	switch ev.Kind {
	case KindStored:
		if err := ix.store(ev); err != nil {
			switch RejectReason(err) {
			case "parent_not_found":
				c.ParentNotFound++
			default:
				c.InvalidSequence++
			}
			return err
		}
		c.EventsStored++
	case KindRemoved:
		rv := ix.rev[ev.Worker]
		for _, bh := range ev.BlockHashes {
			p, ok := rv[bh]
			if !ok {
				c.BlockNotFound++
				continue
			}
			delete(rv, bh)
			ix.drop(ev.Worker, p)
			c.BlocksRemoved++
		}
		if rv != nil && len(rv) == 0 {
			delete(ix.rev, ev.Worker)
		}
		c.EventsRemoved++
	case KindCleared:
		ix.clear(ev.Worker)
		c.EventsCleared++
	case KindWorkerRemoved:
		for k := range ix.rev {
			if k.WorkerID == ev.Worker.WorkerID {
				ix.clear(k)
			}
		}
		c.EventsWorkerRemoved++
	default:
		c.InvalidEvent++
		return fmt.Errorf("event kind %d: %w", ev.Kind, ErrInvalidEvent)
	}
	return nil
}

func (ix *model) clear(w WorkerKey) {
	for _, p := range ix.rev[w] {
		ix.drop(w, p)
		ix.counters.BlocksRemoved++
	}
	delete(ix.rev, w)
}

func (ix *model) store(ev *Event) error {
	if len(ev.Blocks) == 0 {
		return fmt.Errorf("worker %v: stored event without blocks: %w", ev.Worker, ErrInvalidSequence)
	}
	rv := ix.rev[ev.Worker]
	var pos, seq uint64
	if ev.HasParent {
		for _, b := range ev.Blocks {
			if b.BlockHash == ev.ParentHash {
				return fmt.Errorf("worker %v: parent block %d is one of the event's own blocks: %w", ev.Worker, ev.ParentHash, ErrInvalidSequence)
			}
		}
		p, ok := rv[ev.ParentHash]
		if !ok {
			return fmt.Errorf("worker %v: parent block %d not held: %w", ev.Worker, ev.ParentHash, ErrParentNotFound)
		}
		pos, seq = uint64(p.pos)+1, p.seq
	}
	if ev.HasStartPosition {
		pos = ev.StartPosition
	}
	if pos > MaxPosition || uint64(len(ev.Blocks))-1 > MaxPosition-pos {
		return fmt.Errorf("worker %v: positions %d+%d overflow: %w", ev.Worker, pos, len(ev.Blocks), ErrInvalidSequence)
	}
	if rv == nil {
		rv = map[uint64]mplace{}
		ix.rev[ev.Worker] = rv
	}
	for i, b := range ev.Blocks {
		switch {
		case i > 0 || ev.HasParent:
			seq = NextSeq(seq, b.TokensHash)
		case ev.HasStartPosition:
			seq = b.BlockHash
		default:
			seq = b.TokensHash
		}
		pl := mplace{pos: uint32(pos) + uint32(i), th: b.TokensHash, seq: seq}
		if old, ok := rv[b.BlockHash]; ok {
			if old == pl {
				ix.counters.DuplicateStore++
				continue
			}
			ix.drop(ev.Worker, old)
		}
		rv[b.BlockHash] = pl
		ek := mkey{pl.pos, pl.th}
		e := ix.entries[ek]
		if e == nil {
			e = map[uint64]map[WorkerKey]int{}
			ix.entries[ek] = e
		}
		g := e[pl.seq]
		if g == nil {
			g = map[WorkerKey]int{}
			e[pl.seq] = g
		}
		g[ev.Worker]++
		ix.counters.BlocksStored++
		if ix.step != nil {
			ix.step()
		}
	}
	return nil
}

func (ix *model) drop(w WorkerKey, p mplace) {
	ek := mkey{p.pos, p.th}
	e := ix.entries[ek]
	g := e[p.seq]
	g[w]--
	if g[w] == 0 {
		delete(g, w)
	}
	if len(g) == 0 {
		delete(e, p.seq)
	}
	if len(e) == 0 {
		delete(ix.entries, ek)
	}
}

// Match scores every worker key (or only candidates, when given) by the number
// of leading blocks of localHashes it holds. Workers scoring 0 are omitted; the
// result is sorted as by [SortScores].
func (ix *model) Match(localHashes []uint64, candidates []WorkerKey) []Score {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	seqs := SeqHashes(nil, localHashes)
	var ws []WorkerKey
	if candidates != nil {
		for _, c := range candidates {
			if !slices.Contains(ws, c) {
				ws = append(ws, c)
			}
		}
	} else {
		for k := range ix.rev {
			ws = append(ws, k)
		}
	}
	out := []Score{}
	for _, w := range ws {
		k := 0
		for k < len(localHashes) && ix.entries[mkey{uint32(k), localHashes[k]}][seqs[k]][w] > 0 {
			k++
		}
		if k > 0 {
			out = append(out, Score{Worker: w, MatchedBlocks: k})
		}
	}
	SortScores(out)
	return out
}

// Len returns the number of (position, local hash) entries.
func (ix *model) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.entries)
}

// Stats returns the size of the index and its counters.
func (ix *model) Stats() Stats {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := Stats{Entries: len(ix.entries), WorkerKeys: len(ix.rev), Counters: ix.counters}
	for _, rv := range ix.rev {
		s.HolderBlocks += len(rv)
	}
	return s
}

// Workers returns the block count of every worker key that holds a block,
// sorted by worker id, then DP rank.
func (ix *model) Workers() []WorkerBlocks {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]WorkerBlocks, 0, len(ix.rev))
	for k, rv := range ix.rev {
		out = append(out, WorkerBlocks{Worker: k, Blocks: len(rv)})
	}
	slices.SortFunc(out, func(a, b WorkerBlocks) int {
		if a.Worker.WorkerID != b.Worker.WorkerID {
			if a.Worker.WorkerID < b.Worker.WorkerID {
				return -1
			}
			return 1
		}
		return int(a.Worker.DPRank) - int(b.Worker.DPRank)
	})
	return out
}
