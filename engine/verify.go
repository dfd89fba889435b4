package engine

import (
	"errors"
	"fmt"
)

// Verify checks the index's internal invariants and returns every violation
// found (joined), or nil: no empty entry, no empty place, entry and place
// counts, every reverse-map record backed by a holder and every holder by a
// record, and, for workers whose kids are tracked, exact kids counts and
// parents held. It stops writers while it walks everything: for tests and
// offline tools, not for a serving path.
func (ix *Index) Verify() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var errs []error
	bad := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	type hold struct {
		ref uint32
		id  uint32
	}
	holds := map[hold]uint32{} // -> kids recorded
	for si := range ix.shards {
		s := &ix.shards[si]
		entries, places := 0, 0
		for _, slot := range s.table {
			if slot == 0 {
				continue
			}
			entries++
			head := s.place(uint32(slot))
			if uint32(slot>>32) != uint32(keyHash(head.pos, head.th)>>32) {
				bad("shard %d: entry (%d, %d) has a wrong fingerprint", si, head.pos, head.th)
			}
			for local := uint32(slot); local != 0; local = s.place(local).next {
				p := s.place(local)
				places++
				if p.pos != head.pos || p.th != head.th {
					bad("shard %d: place %d is linked into entry (%d, %d) but is (%d, %d)", si, local, head.pos, head.th, p.pos, p.th)
				}
				if p.n == 0 {
					bad("shard %d: entry (%d, %d) seq %d has no holder", si, p.pos, p.th, p.seq)
				}
				for _, hd := range s.holders(p) {
					k := hold{makeRef(uint32(si), local), hd.wid}
					if _, dup := holds[k]; dup {
						bad("shard %d: place %d lists worker id %d twice", si, local, hd.wid)
					}
					holds[k] = hd.kids
				}
			}
		}
		if entries != s.entries {
			bad("shard %d: %d entries counted, %d in the table", si, s.entries, entries)
		}
		if places != s.places {
			bad("shard %d: %d places counted, %d linked", si, s.places, places)
		}
	}
	seen := map[hold]bool{}
	total := 0
	for id, w := range ix.workers {
		if w == nil {
			continue
		}
		total += w.rev.n
		if w.rev.n == 0 {
			bad("worker %v holds nothing but is registered", w.key)
		}
		refs := map[uint32]uint32{}
		w.rev.each(func(bh uint64, ref uint32) {
			refs[ref]++
			if _, ok := holds[hold{ref, uint32(id)}]; !ok {
				bad("worker %v block %d: not a holder of its place", w.key, bh)
			}
		})
		for ref, n := range refs {
			seen[hold{ref, uint32(id)}] = true
			if w.dup[ref] != n-1 {
				bad("worker %v: place %d held under %d block hashes, dup count %d", w.key, ref, n, w.dup[ref])
			}
		}
		if w.untracked {
			continue
		}
		if ix.linear[id] != 0 {
			bad("worker %v: tracked but flagged linear", w.key)
		}
		kids := map[uint32]uint32{}
		for ref := range refs {
			p := ix.placeOf(ref)
			if p.pos == 0 {
				if p.seq != p.th {
					bad("worker %v: tracked root place %d has seq %d != local hash %d", w.key, ref, p.seq, p.th)
				}
				continue
			}
			if refs[p.parent] == 0 {
				bad("worker %v: tracked, holds place %d (position %d) without its parent", w.key, ref, p.pos)
				continue
			}
			if pp := ix.placeOf(p.parent); pp.pos+1 != p.pos || NextSeq(pp.seq, p.th) != p.seq {
				bad("worker %v: place %d does not chain from its parent %d", w.key, ref, p.parent)
			}
			kids[p.parent]++
		}
		for ref := range refs {
			if got := holds[hold{ref, uint32(id)}]; got != kids[ref] {
				bad("worker %v: place %d records %d kids, holds %d", w.key, ref, got, kids[ref])
			}
		}
	}
	for k := range holds {
		if !seen[k] {
			bad("place %d lists worker id %d, which holds no block there", k.ref, k.id)
		}
	}
	if total != ix.holderBlocks {
		bad("holder blocks: %d counted, %d held", ix.holderBlocks, total)
	}
	return errors.Join(errs...)
}
