package engine

import (
	"fmt"
)

// Apply applies one event. A rejected event (the error wraps
// [ErrParentNotFound], [ErrInvalidSequence] or [ErrInvalidEvent]) changes
// nothing but its counter. Skipped blocks (a duplicate store, a removal of a
// block not held) are counted and do not fail the event.
func (ix *Index) Apply(ev *Event) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	c := &ix.counters
	switch ev.Kind {
	case KindStored:
		if err := ix.store(ev); err != nil {
			switch RejectReason(err) {
			case ErrParentNotFound.Error():
				c.ParentNotFound++
			case ErrTooManyWorkers.Error():
				c.TooManyWorkers++
			default:
				c.InvalidSequence++
			}
			return err
		}
		c.EventsStored++
	case KindRemoved:
		ix.remove(ev)
		ix.maybeCompact()
		c.EventsRemoved++
	case KindCleared:
		if id, w := ix.worker(ev.Worker); w != nil {
			ix.clear(id, w)
			ix.maybeCompact()
		}
		c.EventsCleared++
	case KindWorkerRemoved:
		for id, w := range ix.workers {
			if w != nil && w.key.WorkerID == ev.Worker.WorkerID {
				ix.clear(uint32(id), w)
			}
		}
		ix.maybeCompact()
		c.EventsWorkerRemoved++
	default:
		c.InvalidEvent++
		return fmt.Errorf("worker %v: event kind %d: %w", ev.Worker, ev.Kind, ErrInvalidEvent)
	}
	return nil
}

func (ix *Index) store(ev *Event) error {
	if len(ev.Blocks) == 0 {
		return fmt.Errorf("worker %v: stored event without blocks: %w", ev.Worker, ErrInvalidSequence)
	}
	id, w := ix.worker(ev.Worker)
	var (
		pos     uint64
		prevSeq uint64
		prevRef uint32
		linked  bool // the first block chains from the parent at the next position
	)
	if ev.HasParent {
		for _, b := range ev.Blocks {
			if b.BlockHash == ev.ParentHash {
				return fmt.Errorf("worker %v: parent block %d is one of the event's own blocks: %w", ev.Worker, ev.ParentHash, ErrInvalidSequence)
			}
		}
		ok := false
		if w != nil {
			prevRef, ok = w.rev.get(ev.ParentHash)
		}
		if !ok {
			return fmt.Errorf("worker %v: parent block %d not held: %w", ev.Worker, ev.ParentHash, ErrParentNotFound)
		}
		pp := ix.placeOf(prevRef)
		pos, prevSeq, linked = uint64(pp.pos)+1, pp.seq, true
	}
	if ev.HasStartPosition {
		linked = linked && ev.StartPosition == pos
		pos = ev.StartPosition
	}
	if pos > MaxPosition || uint64(len(ev.Blocks))-1 > MaxPosition-pos {
		return fmt.Errorf("worker %v: positions from %d for %d blocks overflow: %w", ev.Worker, pos, len(ev.Blocks), ErrInvalidSequence)
	}
	if w == nil {
		if len(ix.byKey) >= MaxWorkerKeys {
			return fmt.Errorf("worker %v: %d worker keys already hold blocks: %w", ev.Worker, len(ix.byKey), ErrTooManyWorkers)
		}
		id, w = ix.addWorker(ev.Worker)
	}
	ix.beginChange(id)
	defer ix.endChange(id)
	seqs, hashes := ix.prefetchStore(w, ev, pos, prevSeq)
	for i, b := range ev.Blocks {
		seq := seqs[i]
		p := uint32(pos) + uint32(i)
		var parent uint32
		if i > 0 || linked {
			parent = prevRef
		}
		// One probe of the reverse map serves both the lookup and the
		// insert: nothing below changes the map before the slot is written
		// (room for the insert is made first).
		if slots := roomFor(&ix.grow, revGrowth(), w.rev.n, len(w.rev.slots), &w.revAsked, &w.revSpare); slots != nil {
			w.rev.rehash(slots)
		}
		mk := mix64(b.BlockHash)
		at, stop := w.rev.findMixed(mk)
		if at >= 0 {
			old := w.rev.slots[at].ref
			if op := ix.placeOf(old); op.pos == p && op.th == b.TokensHash && op.seq == seq {
				ix.counters.DuplicateStore++
				prevRef, prevSeq = old, seq
				continue
			}
			if old == parent {
				// The chain's parent itself moves away: its link is gone.
				parent = 0
			}
			ix.dropHolding(id, w, old, false)
		} else {
			ix.holderBlocks++
		}
		ref := ix.addHolding(id, w, p, b.TokensHash, seq, hashes[i], parent)
		if at >= 0 {
			w.rev.slots[at].ref = ref
		} else {
			w.rev.insertAt(stop, revSlot{lo: uint32(mk), hi: uint32(mk >> 32), ref: ref})
			w.rev.n++
		}
		ix.counters.BlocksStored++
		prevRef, prevSeq = ref, seq
	}
	return nil
}

// addHolding makes worker id a holder of (pos, th, seq), linked to the parent
// place ref when the worker's kids are tracked.
func (ix *Index) addHolding(id uint32, w *worker, pos uint32, th, seq, h uint64, parent uint32) uint32 {
	tracked := !w.untracked
	// A chain root must carry its own local hash as seq, and every other block
	// must hang under a held parent, or the worker may have holes.
	if tracked && ((pos == 0 && seq != th) || (pos > 0 && parent == 0)) {
		ix.untrack(id, w)
		tracked = false
	}
	if !tracked || pos == 0 {
		parent = 0
	}
	si := uint32(h >> (64 - shardBits))
	local, added := ix.shards[si].addHolder(&ix.grow, pos, th, seq, fingerprint(h), id, parent)
	ref := makeRef(si, local)
	if !added {
		if w.dup == nil {
			w.dup = map[uint32]uint32{}
		}
		w.dup[ref]++
		return ref
	}
	if parent != 0 && !ix.shards[refShard(parent)].addKids(refLocal(parent), id, 1) {
		ix.untrack(id, w)
	}
	return ref
}

// dropHolding removes one of worker id's block hashes from place ref. Inside a
// Removed event (inRemoved) an orphaned child is only counted, since a later
// block of the same event may remove it too.
func (ix *Index) dropHolding(id uint32, w *worker, ref uint32, inRemoved bool) {
	if n := w.dup[ref]; n > 0 {
		if n == 1 {
			delete(w.dup, ref)
		} else {
			w.dup[ref] = n - 1
		}
		return
	}
	kids, parent, ok := ix.shards[refShard(ref)].removeHolder(refLocal(ref), id)
	if !ok || w.untracked {
		return
	}
	if kids > 0 {
		if !inRemoved {
			ix.untrack(id, w)
			return
		}
		w.orphans += kids
		ix.setLinear(id, true)
	}
	if parent != 0 && !ix.shards[refShard(parent)].addKids(refLocal(parent), id, -1) {
		// The parent hold is gone: this child was an orphan of this event.
		if inRemoved && w.orphans > 0 {
			w.orphans--
		} else {
			ix.untrack(id, w)
		}
	}
}

func (ix *Index) remove(ev *Event) {
	id, w := ix.worker(ev.Worker)
	if w == nil {
		ix.counters.BlockNotFound += uint64(len(ev.BlockHashes))
		return
	}
	ix.beginChange(id)
	defer ix.endChange(id)
	for _, ref := range ix.takeRemoved(w, ev.BlockHashes) {
		if ref == 0 {
			ix.counters.BlockNotFound++
			continue
		}
		ix.dropHolding(id, w, ref, true)
		ix.holderBlocks--
		ix.counters.BlocksRemoved++
	}
	switch {
	case w.rev.n == 0:
		ix.removeWorker(id)
	case w.orphans > 0:
		ix.untrack(id, w)
	case !w.untracked:
		ix.setLinear(id, false)
	}
}

// clear removes every block of worker id and forgets it.
func (ix *Index) clear(id uint32, w *worker) {
	ix.beginChange(id)
	defer ix.endChange(id)
	// Blocks leave one at a time; meanwhile a query must not assume no holes.
	ix.setLinear(id, true)
	w.rev.each(func(_ uint64, ref uint32) {
		// A place held under two block hashes reports !ok the second time.
		ix.shards[refShard(ref)].removeHolder(refLocal(ref), id)
	})
	ix.holderBlocks -= w.rev.n
	ix.counters.BlocksRemoved += uint64(w.rev.n)
	ix.removeWorker(id)
}
