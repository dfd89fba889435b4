package engine

import (
	"fmt"
	"sync"
)

// Index is the sharded positional index. Apply calls are serialised; Match and
// the read methods run concurrently with them and with each other.
type Index struct {
	// mu serialises writers: events apply one at a time, in call order.
	mu sync.Mutex

	shards [shardCount]shard

	// wmu guards the worker registry below for readers. The writer (holding
	// mu) changes registry membership only under wmu's write lock; per-worker
	// state outside the registry is the writer's alone.
	wmu     sync.RWMutex
	workers []*worker   // by dense id; nil for a free id
	keys    []WorkerKey // by dense id
	// linear, by dense id, is odd when queries must check that worker
	// position by position (it may have holes), even when it has no holes.
	// Every change moves it to the next value (see setLinear), so that a
	// query can tell whether it changed while the query ran. Written by the
	// writer, read atomically by queries.
	linear []uint32
	// changes, by dense id, is odd while an event changes that worker's
	// holds and moves on by one at its start and at its end (see
	// beginChange): a query that scores a worker position by position,
	// probing each at another moment, compares it before and after, so
	// that the score is of one moment. Written by the writer, read
	// atomically by queries; never reset, so a reused id cannot repeat it.
	changes []uint32
	order   []uint32 // dense ids sorted by key
	byKey   map[WorkerKey]uint32
	freeIDs []uint32

	holderBlocks int
	counters     Counters

	// Writer-owned scratch (see prefetch.go).
	seqBuf, hashBuf []uint64
	refBuf          []uint32
	sink            uint64

	// Reservation (see Reserve): the reserved reverse-map size, for how many
	// worker keys, how many present ones hold such a map, and reserved maps
	// kept ready for worker keys to come.
	reservedBlocks int
	revFloor       int
	revKeys        int
	revReserved    int
	revSpare       [][]revSlot

	grow grower // memory for growing tables and slabs, made ahead

	scratch sync.Pool // *matchScratch
	spare   *Frozen   // memory for the next Freeze (see Frozen.Release)
}

// New returns an empty index.
func New() *Index {
	return &Index{byKey: map[WorkerKey]uint32{}, grow: newGrower()}
}

// placeOf returns the place behind ref. Only the writer may call it without
// the shard's lock.
func (ix *Index) placeOf(ref uint32) *place {
	return ix.shards[refShard(ref)].place(refLocal(ref))
}

// Len returns the number of (position, local hash) entries.
func (ix *Index) Len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.entries()
}

func (ix *Index) entries() int {
	n := 0
	for i := range ix.shards {
		n += ix.shards[i].entries
	}
	return n
}

// Stats returns the size of the index and its counters.
func (ix *Index) Stats() Stats {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return Stats{Entries: ix.entries(), HolderBlocks: ix.holderBlocks, WorkerKeys: len(ix.byKey), Counters: ix.counters}
}

// Workers returns the block count of every worker key that holds a block,
// sorted by worker id, then DP rank.
func (ix *Index) Workers() []WorkerBlocks {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]WorkerBlocks, 0, len(ix.order))
	for _, id := range ix.order {
		w := ix.workers[id]
		out = append(out, WorkerBlocks{Worker: w.key, Blocks: w.rev.n})
	}
	return out
}

// WorkerBlockCount returns how many blocks key holds.
func (ix *Index) WorkerBlockCount(key WorkerKey) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if _, w := ix.worker(key); w != nil {
		return w.rev.n
	}
	return 0
}

// Counters returns the counters.
func (ix *Index) Counters() Counters {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.counters
}

func (ix *Index) String() string {
	s := ix.Stats()
	return fmt.Sprintf("index{entries=%d holder_blocks=%d worker_keys=%d}", s.Entries, s.HolderBlocks, s.WorkerKeys)
}
