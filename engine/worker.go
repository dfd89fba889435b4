package engine

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// worker is the writer's state for one worker key.
type worker struct {
	key WorkerKey
	rev revTable
	// revSpare is the reverse map prepared for rev's next growth (see
	// grower), asked for when rev was revAsked slots long.
	revSpare spare[revSlot]
	revAsked int
	// dup counts, per place ref, the block hashes held there beyond the first:
	// one content cached twice under two engine hashes stays held until both go.
	dup map[uint32]uint32
	// untracked: the holders' kids counts of this worker are no longer kept
	// (it stored a block without its parent, or removed a parent and kept a
	// child), so queries check it position by position until it holds nothing.
	untracked bool
	// orphans counts, during one Removed event, children whose parent hold was
	// dropped and that are still held; a child removed later in the same event
	// takes its count back.
	orphans uint32
}

func compareKeys(a, b WorkerKey) int {
	if c := cmp.Compare(a.WorkerID, b.WorkerID); c != 0 {
		return c
	}
	return cmp.Compare(a.DPRank, b.DPRank)
}

// worker returns the dense id and state of key, or nil.
func (ix *Index) worker(key WorkerKey) (uint32, *worker) {
	id, ok := ix.byKey[key]
	if !ok {
		return 0, nil
	}
	return id, ix.workers[id]
}

// addWorker registers key under a free dense id.
func (ix *Index) addWorker(key WorkerKey) (uint32, *worker) {
	// Memory first: queries wait while wmu is held.
	w := &worker{key: key, rev: ix.newRevTable()}
	ix.wmu.Lock()
	defer ix.wmu.Unlock()
	var id uint32
	if n := len(ix.freeIDs); n > 0 {
		id = ix.freeIDs[n-1]
		ix.freeIDs = ix.freeIDs[:n-1]
		ix.workers[id], ix.keys[id] = w, key
		ix.setLinear(id, false)
	} else {
		id = uint32(len(ix.workers))
		ix.workers = append(ix.workers, w)
		ix.keys = append(ix.keys, key)
		ix.linear = append(ix.linear, 0)
		ix.changes = append(ix.changes, 0)
	}
	ix.byKey[key] = id
	at, _ := slices.BinarySearchFunc(ix.order, key, func(id uint32, k WorkerKey) int { return compareKeys(ix.keys[id], k) })
	ix.order = slices.Insert(ix.order, at, id)
	return id, w
}

// removeWorker forgets a worker key that holds nothing. The wmu write lock
// waits for running queries, so a query never sees a dense id change owner.
func (ix *Index) removeWorker(id uint32) {
	ix.wmu.Lock()
	key := ix.keys[id]
	at, _ := slices.BinarySearchFunc(ix.order, key, func(id uint32, k WorkerKey) int { return compareKeys(ix.keys[id], k) })
	ix.order = slices.Delete(ix.order, at, at+1)
	delete(ix.byKey, key)
	rev := ix.workers[id].rev
	ix.workers[id] = nil
	ix.keys[id] = WorkerKey{}
	ix.freeIDs = append(ix.freeIDs, id)
	ix.wmu.Unlock()
	ix.keepRevSlots(rev)
}

// untrack stops keeping id's kids counts; queries check it linearly.
func (ix *Index) untrack(id uint32, w *worker) {
	w.untracked = true
	w.orphans = 0
	ix.setLinear(id, true)
}

// setLinear marks worker id as possibly having holes (on) or as having none.
// A change moves its word to the next value, never back to an earlier one:
// a query compares the word before and after it scores a worker by
// bisection.
func (ix *Index) setLinear(id uint32, on bool) {
	if v := ix.linear[id]; (v&1 != 0) != on {
		atomic.StoreUint32(&ix.linear[id], v+1)
	}
}

// isLinear reports whether queries check worker id position by position.
func (ix *Index) isLinear(id uint32) bool { return atomic.LoadUint32(&ix.linear[id])&1 != 0 }

// beginChange and endChange bracket an event that changes worker id's holds
// (see Index.changes).
func (ix *Index) beginChange(id uint32) { atomic.AddUint32(&ix.changes[id], 1) }
func (ix *Index) endChange(id uint32)   { atomic.AddUint32(&ix.changes[id], 1) }
