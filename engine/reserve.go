package engine

import (
	"context"
	"slices"
)

// ReservedBytesPerHolderBlock is about what Reserve maps in a holder-block
// reserved, used or not: a shard table slot (at load 0.75), three quarters
// of a 32-byte place, and a reverse-map slot (at load 0.78).
const ReservedBytesPerHolderBlock = 55

// Reserve sizes the index for holderBlocks holder-blocks held by up to
// workerKeys worker keys, and maps the memory in now. An index that grows
// from empty resizes its tables many times on the way (a resize copies
// every slot), and faults in fresh memory as it goes, which on this
// project's VMs costs about 2 ms a MiB on the writer's goroutine: filling
// a fresh index with the benchmark workload's events (128 workers of 8,192
// blocks) took 40 % less time reserved than grown.
//
// What is reserved: shard tables for a place per holder-block, slab pages
// for three places in four holder-blocks (workers share places), and a
// reverse map for each of workerKeys keys, sized for its share. A shard or
// worker above its share grows as usual. Reserved tables, pages and maps
// are kept when the index shrinks below them (churn near capacity then does
// not resize them), and the maps of reserved keys that leave are kept for
// the next keys; keys beyond workerKeys get maps that grow and shrink as
// usual. A second Reserve only ever adds. Memory: about
// ReservedBytesPerHolderBlock a holder-block reserved, used or not
// (snapshots copy only what is used).
// Reserve holds up events while it maps the memory, and each shard's
// queries for a moment: call it before events flow.
//
// Arguments of 0 or less reserve nothing; reservations above
// MaxReservedHolderBlocks or MaxWorkerKeys are cut to them.
//
// A large reservation takes seconds (150M holder-blocks: about 16 s here),
// so Reserve stops between shards and between reverse maps once ctx is
// done, and returns ctx's error: the index is then reserved in part, and
// as correct as before.
func (ix *Index) Reserve(ctx context.Context, holderBlocks, workerKeys int) error {
	if holderBlocks <= 0 || workerKeys <= 0 {
		return nil
	}
	holderBlocks = min(holderBlocks, MaxReservedHolderBlocks)
	workerKeys = min(workerKeys, MaxWorkerKeys)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	perShard := (holderBlocks + shardCount - 1) / shardCount
	for si := range ix.shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		ix.shards[si].reserve(perShard, perShard*reservedPlaces/4)
	}
	perWorker := (holderBlocks + workerKeys - 1) / workerKeys
	ix.revFloor = max(ix.revFloor, capFor(perWorker, reservedRevLoad))
	ix.revKeys = max(ix.revKeys, workerKeys)
	ix.reservedBlocks = max(ix.reservedBlocks, holderBlocks)
	// Worker keys present that hold reserved maps keep them, grown to the
	// new size; others take the rest of the reservation. Keys beyond it
	// grow their maps as usual.
	for _, id := range ix.order {
		if err := ctx.Err(); err != nil {
			return err
		}
		w := ix.workers[id]
		if w.rev.floor == 0 {
			if ix.revReserved >= ix.revKeys {
				continue
			}
			ix.revReserved++
		}
		w.rev.keepAtLeast(ix.revFloor)
	}
	// Spares of an earlier, smaller reservation go, and so do spares that
	// present keys took the place of.
	ix.revSpare = slices.DeleteFunc(ix.revSpare, func(slots []revSlot) bool { return len(slots) != ix.revFloor })
	keep := max(0, min(len(ix.revSpare), ix.revKeys-ix.revReserved))
	clear(ix.revSpare[keep:])
	ix.revSpare = ix.revSpare[:keep]
	for len(ix.revSpare)+ix.revReserved < ix.revKeys {
		if err := ctx.Err(); err != nil {
			return err
		}
		ix.revSpare = append(ix.revSpare, touched(populated(make([]revSlot, ix.revFloor)), revSlotBytes))
	}
	return nil
}

// Reserved returns what [Index.Reserve] has reserved the index for: the
// largest holder-block count and worker key count asked (as cut), or 0 and 0.
func (ix *Index) Reserved() (holderBlocks, workerKeys int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.reservedBlocks, ix.revKeys
}

// MaxReservedHolderBlocks is the largest reservation [Index.Reserve] makes:
// about 60 GB of memory.
const MaxReservedHolderBlocks = 1 << 30

// reservedRevLoad is a reserved reverse map's load at its worker's share of
// the reservation: below growLoad, so that a worker at its share, with an
// event's blocks stored before its evictions are removed, does not grow.
// Under steady churn (kvidx bench --duplicate 100 --reserve) 0.78 applied
// events 6-8 % faster than 0.85, at 1 more heap byte a holder-block; 0.7
// 13 % faster, at 3 more (63.3 there: too near the 64-byte target).
const reservedRevLoad = 0.78

// reservedPlaces is the quarters of a reservation's holder-blocks that slab
// pages are reserved for. Workers share places (a shared prefix is one
// place with several holders): the benchmark workload's 128 workers hold
// 1.04M holder-blocks at 0.76M places. Pages for every holder-block took 8
// heap bytes a holder-block that no place used; past the reserved pages,
// more come as the index grows. A table slot costs a quarter of a place, so
// tables are reserved for the worst case, a place per holder-block.
const reservedPlaces = 3

// reserve sizes the shard's table for maxPlaces places and its slab pages
// for places. The writer calls it (nothing else changes the table's size or
// the pages), and maps the memory in before it takes the shard lock, for
// which queries wait.
func (s *shard) reserve(maxPlaces, places int) {
	floor := max(s.floor, capFor(maxPlaces, tableGrowLoad))
	var table []uint64
	if len(s.table) < floor {
		table = touched(populated(make([]uint64, floor)), 8)
	}
	// Place numbers start at 1.
	pageFloor := max(s.pageFloor, (places+1+pageSize-1)/pageSize)
	var pages [][]place
	for range pageFloor - len(s.pages) {
		pages = append(pages, touched(populated(make([]place, pageSize)), placeBytes))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = floor
	if table != nil {
		s.rehash(table)
	}
	s.pageFloor = pageFloor
	s.pages = append(s.pages, pages...)
}

// keepAtLeast grows the map to at least size slots and keeps it there.
func (t *revTable) keepAtLeast(size int) {
	t.floor = max(t.floor, size)
	if len(t.slots) < t.floor {
		t.resize(t.floor)
	}
}

// newRevTable returns a new worker key's reverse map: while fewer worker
// keys than reserved are present, one of the reserved size (a spare when
// there is one), else an empty one that grows on the first insert.
func (ix *Index) newRevTable() revTable {
	if ix.revReserved >= ix.revKeys {
		return revTable{}
	}
	ix.revReserved++
	n := len(ix.revSpare)
	if n == 0 {
		return revTable{slots: populated(make([]revSlot, ix.revFloor)), floor: ix.revFloor}
	}
	slots := ix.revSpare[n-1]
	ix.revSpare[n-1] = nil
	ix.revSpare = ix.revSpare[:n-1]
	return revTable{slots: slots, floor: ix.revFloor}
}

// keepRevSlots takes back a removed worker's reverse map: when it was a
// reserved one, of the reserved size, it is kept (cleared) for the next
// worker key.
func (ix *Index) keepRevSlots(rev revTable) {
	if rev.floor == 0 {
		return
	}
	ix.revReserved--
	if len(rev.slots) == ix.revFloor && len(ix.revSpare)+ix.revReserved < ix.revKeys {
		clear(rev.slots)
		ix.revSpare = append(ix.revSpare, rev.slots)
	}
}
