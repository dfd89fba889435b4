package engine

import "slices"

// Reserve sizes the index for holderBlocks holder-blocks held by up to
// workerKeys worker keys, and maps the memory in now. An index that grows
// from empty resizes its tables many times on the way (a resize copies
// every slot), and faults in fresh memory as it goes, which on this
// project's VMs costs about 2 ms a MiB on the writer's goroutine: in the
// benchmark workload (128 workers of 8,192 blocks) a fresh index applied
// events about a quarter slower than one reserved for them.
//
// Reserved tables, slab pages and reverse maps are kept at that size when
// the index shrinks below it (churn near capacity then never resizes them),
// and the reverse maps of worker keys beyond those present are kept ready
// for the next ones to arrive. Above the reservation the index grows and
// shrinks as usual. Reserving less than the index holds, or 0, keeps what
// the index has. A router node knows its workers' cache sizes, hence the
// block count; reserving far more than is used costs memory (about 55
// bytes a holder-block reserved) for nothing. Reserve holds up events
// while it maps the memory (queries go on): call it before they flow.
//
// Reservations above MaxReservedHolderBlocks or MaxWorkerKeys are cut to
// them.
func (ix *Index) Reserve(holderBlocks, workerKeys int) {
	if holderBlocks <= 0 || workerKeys <= 0 {
		return
	}
	holderBlocks = min(holderBlocks, MaxReservedHolderBlocks)
	workerKeys = min(workerKeys, MaxWorkerKeys)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	perShard := (holderBlocks + shardCount - 1) / shardCount
	for si := range ix.shards {
		ix.shards[si].reserve(perShard, perShard*reservedPlaces/4)
	}
	perWorker := (holderBlocks + workerKeys - 1) / workerKeys
	// A worker at its share still has room for an event's worth of blocks
	// stored before its evictions are removed.
	ix.revFloor = max(ix.revFloor, capFor(perWorker, reservedRevLoad))
	ix.revKeys = max(ix.revKeys, workerKeys)
	for _, w := range ix.workers {
		if w != nil {
			w.rev.keepAtLeast(ix.revFloor)
		}
	}
	// Spares of an earlier, smaller reservation go.
	ix.revSpare = slices.DeleteFunc(ix.revSpare, func(slots []revSlot) bool { return len(slots) != ix.revFloor })
	for len(ix.revSpare)+len(ix.byKey) < ix.revKeys {
		ix.revSpare = append(ix.revSpare, touched(populated(make([]revSlot, ix.revFloor)), revSlotBytes))
	}
}

// MaxReservedHolderBlocks is the largest reservation [Index.Reserve] makes:
// about 60 GB of memory.
const MaxReservedHolderBlocks = 1 << 30

// reservedRevLoad is a reserved reverse map's load at its worker's share of
// the reservation.
const reservedRevLoad = 0.85

// reservedPlaces is the quarters of a reservation's holder-blocks that slab
// pages are reserved for. Workers share places (a shared prefix is one
// place with several holders): the benchmark workload's 128 workers hold
// 1.04M holder-blocks at 0.76M places. Pages for every holder-block took 8
// heap bytes a holder-block that no place used; past the reserved pages,
// more come as the index grows. A table slot costs a quarter of a place, so
// tables are reserved for the worst case, a place per holder-block.
const reservedPlaces = 3

// reserve sizes the shard's table for maxPlaces places and its slab pages
// for places.
func (s *shard) reserve(maxPlaces, places int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = max(s.floor, capFor(maxPlaces, tableGrowLoad))
	if len(s.table) < s.floor {
		s.rehash(touched(populated(make([]uint64, s.floor)), 8))
	}
	// Place numbers start at 1.
	s.pageFloor = max(s.pageFloor, (places+1+pageSize-1)/pageSize)
	for len(s.pages) < s.pageFloor {
		s.pages = append(s.pages, touched(populated(make([]place, pageSize)), placeBytes))
	}
}

// keepAtLeast grows the map to at least size slots and keeps it there.
func (t *revTable) keepAtLeast(size int) {
	t.floor = max(t.floor, size)
	if len(t.slots) < t.floor {
		t.resize(t.floor)
	}
}

// newRevSlots returns the slots of a new worker's reverse map: a spare one
// when there is one, of the reserved size when there is a reservation, else
// none (the map grows on the first insert).
func (ix *Index) newRevSlots() []revSlot {
	n := len(ix.revSpare)
	if n == 0 {
		if ix.revFloor == 0 {
			return nil
		}
		return populated(make([]revSlot, ix.revFloor))
	}
	slots := ix.revSpare[n-1]
	ix.revSpare[n-1] = nil
	ix.revSpare = ix.revSpare[:n-1]
	return slots
}

// keepRevSlots takes back the slots of a removed worker's reverse map when
// they are of the reserved size and fewer than the reserved worker keys are
// present or spare, for the next worker key.
func (ix *Index) keepRevSlots(slots []revSlot) {
	if ix.revFloor > 0 && len(slots) == ix.revFloor && len(ix.revSpare)+len(ix.byKey) < ix.revKeys {
		clear(slots)
		ix.revSpare = append(ix.revSpare, slots)
	}
}
