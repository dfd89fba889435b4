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
		places := 0
		keys := map[[2]uint64]bool{}
		for _, slot := range s.table {
			if slot == 0 {
				continue
			}
			places++
			local := uint32(slot)
			p := s.place(local)
			if fp := fingerprint(keyHash(p.pos, p.th)); uint32(slot>>32) != fp {
				bad("shard %d: place (%d, %d, %d) has a wrong fingerprint", si, p.pos, p.th, p.seq)
			} else if s.lookup(p.pos, p.th, p.seq, fp) != local {
				bad("shard %d: place (%d, %d, %d) is not found by lookup", si, p.pos, p.th, p.seq)
			}
			keys[[2]uint64{uint64(p.pos), p.th}] = true
			// A link may be stale, but never outside its shard's places.
			if p.parent != 0 && refLocal(p.parent) >= ix.shards[refShard(p.parent)].nextNew {
				bad("shard %d: place %d links to parent %d, past its shard's places", si, local, p.parent)
			}
			hs := s.holders(p)
			if len(hs) == 0 {
				bad("shard %d: entry (%d, %d) seq %d has no holder", si, p.pos, p.th, p.seq)
			}
			for _, hd := range hs {
				k := hold{makeRef(uint32(si), local), hd.wid()}
				if _, dup := holds[k]; dup {
					bad("shard %d: place %d lists worker id %d twice", si, local, hd.wid())
				}
				holds[k] = s.holderKids(local, hd)
			}
		}
		for idx, x := range s.at {
			list := s.ovf[idx]
			if len(x.of) != len(list) || x.peak < len(list) {
				bad("shard %d: overflow list %d of %d holders has %d indexed (peak %d)", si, idx, len(list), len(x.of), x.peak)
			}
			for i, hd := range list {
				if at, ok := x.of[hd.wid()]; !ok || at != uint32(i) {
					bad("shard %d: overflow list %d: worker id %d at %d is indexed at %d", si, idx, hd.wid(), i, at)
				}
			}
		}
		if len(keys) != s.entries {
			bad("shard %d: %d entries counted, %d in the table", si, s.entries, len(keys))
		}
		if places != s.places {
			bad("shard %d: %d places counted, %d in the table", si, s.places, places)
		}
		if len(s.table) > 0 && float64(places) > tableGrowLoad*float64(len(s.table)) {
			bad("shard %d: table overloaded: %d places in %d slots", si, places, len(s.table))
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
			// A slot out of its run's order would be missed by a search.
			if got, ok := w.rev.get(bh); !ok || got != ref {
				bad("worker %v block %d: its reverse-map slot is not where a search finds it", w.key, bh)
			}
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
		if ix.isLinear(uint32(id)) {
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
