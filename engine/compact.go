package engine

// Compaction returns the memory of places freed after a peak. Places live in
// pages and are referred to by number (from reverse maps, parent links and
// shard tables), so a freed place can only be reused, not returned; after the
// index shrinks, most of its pages would stay allocated. When enough of the
// place slots are free, the writer moves the live places of the sparse shards
// down into the free slots, rewrites every reference to them, and drops the
// emptied pages. Each compaction costs one pass over the index, and the next
// one needs the index to shrink again by the threshold, so the cost per event
// stays constant.

// compactFreeFraction: a shard is compacted when this fraction of its place
// slots, and at least compactMinFree of them, are free.
const (
	compactFreeFraction = 8 // 1/8
	compactMinFree      = pageSize
)

func (s *shard) freeSlots() int { return int(s.nextNew) - 1 - s.places }

func (s *shard) needsCompaction() bool {
	free := s.freeSlots()
	return free >= compactMinFree && free*compactFreeFraction >= int(s.nextNew)-1 && s.compactionFrees()
}

// compactionFrees reports whether compacting the shard would drop a page:
// it keeps the pages its live places need, and its reserved ones.
func (s *shard) compactionFrees() bool {
	return len(s.pages) > max(s.places>>pageBits+1, s.pageFloor)
}

// maybeCompact compacts the shards that need it, together with those half
// way there, so that one pass over the reverse maps serves many shards.
// Writer only.
func (ix *Index) maybeCompact() {
	due := false
	for si := range ix.shards {
		due = due || ix.shards[si].needsCompaction()
	}
	if !due {
		return
	}
	// moved[si][old place number] is the new place number (0: not moved).
	var moved [shardCount][]uint32
	for si := range ix.shards {
		s := &ix.shards[si]
		if free := s.freeSlots(); free > 0 && 2*free*compactFreeFraction >= int(s.nextNew)-1 && s.compactionFrees() {
			moved[si] = s.compact()
		}
	}
	remap := func(ref uint32) uint32 {
		if m := moved[refShard(ref)]; m != nil && int(refLocal(ref)) < len(m) {
			if to := m[refLocal(ref)]; to != 0 {
				return makeRef(refShard(ref), to)
			}
		}
		return ref
	}
	for _, w := range ix.workers {
		if w == nil {
			continue
		}
		for i := range w.rev.slots {
			if ref := w.rev.slots[i].ref; ref != 0 {
				w.rev.slots[i].ref = remap(ref)
			}
		}
		if len(w.dup) > 0 {
			dup := make(map[uint32]uint32, len(w.dup))
			for ref, n := range w.dup {
				dup[remap(ref)] = n
			}
			w.dup = dup
		}
	}
	// Parent links are the writer's alone (queries never read them). A link
	// to a freed place is stale (readers check that a link chains); past a
	// compacted shard's places it would point outside its pages, so it goes.
	for si := range ix.shards {
		s := &ix.shards[si]
		for _, slot := range s.table {
			if slot != 0 {
				p := s.place(uint32(slot))
				p.parent = remap(p.parent)
				if p.parent != 0 && refLocal(p.parent) >= ix.shards[refShard(p.parent)].nextNew {
					p.parent = 0
				}
			}
		}
	}
}

// compact moves the shard's live places into its lowest slots and drops the
// pages past them. It returns, by old place number, the new number of each
// place moved.
func (s *shard) compact() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := uint32(s.places)
	moved := make([]uint32, s.nextNew)
	// Free slots at or below live receive the places above it: there are
	// exactly as many of each.
	var holes []uint32
	for local := s.free; local != 0; local = s.place(local).parent {
		if local <= live {
			holes = append(holes, local)
		}
	}
	for i, slot := range s.table {
		if slot == 0 || uint32(slot) <= live {
			continue
		}
		from := uint32(slot)
		to := holes[len(holes)-1]
		holes = holes[:len(holes)-1]
		*s.place(to) = *s.place(from)
		s.table[i] = slot>>32<<32 | uint64(to)
		moved[from] = to
	}
	if len(s.bigKids) > 0 {
		big := make(map[uint64]uint32, len(s.bigKids))
		for key, n := range s.bigKids {
			if to := moved[key>>32]; to != 0 {
				key = uint64(to)<<32 | key&(1<<32-1)
			}
			big[key] = n
		}
		s.bigKids = big
	}
	s.free = 0
	s.nextNew = live + 1
	pages := int(live>>pageBits) + 1
	// Reserved pages stay, never-used again (see Index.Reserve).
	keep := max(pages, min(s.pageFloor, len(s.pages)))
	for _, pg := range s.pages[pages:keep] {
		clear(pg)
	}
	clear(s.pages[keep:])
	s.pages = s.pages[:keep]
	// The rest of the last page is never-used again. When live ends a page,
	// the never-used slots begin with the next page, dropped or cleared above.
	if rest := (live + 1) & (pageSize - 1); rest != 0 {
		clear(s.pages[pages-1][rest:])
	}
	return moved
}
