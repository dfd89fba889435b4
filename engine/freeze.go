package engine

import (
	"cmp"
	"slices"
)

// Frozen is an immutable copy of an index's state between two events: what a
// snapshot writes. [Index.Freeze] takes it under the writer lock with a few
// slice copies, so event application pauses only for that; queries never
// pause. Everything else (grouping, sorting) happens when the copy is read,
// on the reader's goroutine.
type Frozen struct {
	stats    Stats
	keys     []WorkerKey // by frozen worker index
	revs     [][]revSlot // by frozen worker index
	pages    [shardCount][][]place
	counters Counters
}

// PlaceRecord is one place of a frozen index: a (position, local hash,
// router seq) and who holds it under which block hashes. A snapshot holds
// nothing else: an entry is the set of places sharing (position, local hash).
type PlaceRecord struct {
	// ID names the place within one Frozen (and the snapshot made from it).
	ID uint32
	// Parent is the ID of the place this one chains from (position-1, and
	// this seq = NextSeq(parent seq, TokensHash)), or 0 when no held place is
	// known to be its parent. It lets a loaded index know, without replaying
	// history, which workers hold their blocks without holes.
	Parent     uint32
	Position   uint32
	TokensHash uint64
	Seq        uint64
	Holders    []HolderRecord // sorted by worker key; never empty
}

// HolderRecord is one worker key's hold on a place, under one or more block
// hashes (one content cached under two engine hashes).
type HolderRecord struct {
	Worker      WorkerKey
	BlockHashes []uint64
}

// Freeze returns a consistent copy of the index as of the last applied event.
// Event application waits while it copies; queries do not.
func (ix *Index) Freeze() *Frozen {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	f := &Frozen{
		stats:    Stats{Entries: ix.entries(), HolderBlocks: ix.holderBlocks, WorkerKeys: len(ix.byKey), Counters: ix.counters},
		counters: ix.counters,
	}
	for _, id := range ix.order {
		w := ix.workers[id]
		f.keys = append(f.keys, w.key)
		f.revs = append(f.revs, slices.Clone(w.rev.slots))
	}
	for si := range ix.shards {
		s := &ix.shards[si]
		f.pages[si] = make([][]place, len(s.pages))
		for i, pg := range s.pages {
			f.pages[si][i] = slices.Clone(pg)
		}
	}
	return f
}

// Stats returns the frozen index's size and counters.
func (f *Frozen) Stats() Stats { return f.stats }

// Workers returns the frozen worker keys, sorted, with their block counts.
func (f *Frozen) Workers() []WorkerBlocks {
	out := make([]WorkerBlocks, len(f.keys))
	for i, k := range f.keys {
		n := 0
		for _, s := range f.revs[i] {
			if s.ref != 0 {
				n++
			}
		}
		out[i] = WorkerBlocks{Worker: k, Blocks: n}
	}
	return out
}

func (f *Frozen) place(ref uint32) *place {
	local := refLocal(ref)
	return &f.pages[refShard(ref)][local>>pageBits][local&(pageSize-1)]
}

// Places calls yield for every place, in (position, local hash, seq) order,
// until yield returns false. The record and its slices are reused between
// calls: copy what must outlive one.
func (f *Frozen) Places(yield func(*PlaceRecord) bool) {
	// The reverse maps' (place, worker, block hash) triples, grouped by place.
	type hold struct {
		ref uint32
		w   uint32 // frozen worker index: keys are sorted, so is this
		bh  uint64
	}
	holds := make([]hold, 0, f.stats.HolderBlocks)
	for w, slots := range f.revs {
		for _, s := range slots {
			if s.ref != 0 {
				holds = append(holds, hold{ref: s.ref, w: uint32(w), bh: unmix64(s.mixed())})
			}
		}
	}
	slices.SortFunc(holds, func(a, b hold) int {
		if c := cmp.Compare(a.ref, b.ref); c != 0 {
			return c
		}
		if c := cmp.Compare(a.w, b.w); c != 0 {
			return c
		}
		return cmp.Compare(a.bh, b.bh)
	})
	type span struct {
		pos        uint32
		th, seq    uint64
		ref        uint32
		start, end int
	}
	var spans []span
	for i := 0; i < len(holds); {
		j := i + 1
		for j < len(holds) && holds[j].ref == holds[i].ref {
			j++
		}
		p := f.place(holds[i].ref)
		spans = append(spans, span{pos: p.pos, th: p.th, seq: p.seq, ref: holds[i].ref, start: i, end: j})
		i = j
	}
	byRef := func(ref uint32) (span, bool) {
		i, ok := slices.BinarySearchFunc(spans, ref, func(s span, ref uint32) int { return cmp.Compare(s.ref, ref) })
		if !ok {
			return span{}, false
		}
		return spans[i], true
	}
	holdsAt := func(s span, w uint32) bool {
		_, ok := slices.BinarySearchFunc(holds[s.start:s.end], w, func(h hold, w uint32) int { return cmp.Compare(h.w, w) })
		return ok
	}
	// parentOf keeps a parent link only where it is sound: the parent chains
	// to the place and one of the place's holders holds it.
	parentOf := func(s span) uint32 {
		p := f.place(s.ref)
		if p.parent == 0 || p.pos == 0 {
			return 0
		}
		ps, ok := byRef(p.parent)
		if !ok || ps.pos+1 != p.pos || NextSeq(ps.seq, p.th) != p.seq {
			return 0
		}
		for _, h := range holds[s.start:s.end] {
			if holdsAt(ps, h.w) {
				return p.parent
			}
		}
		return 0
	}
	parents := make([]uint32, len(spans))
	for i, s := range spans {
		parents[i] = parentOf(s)
	}
	order := make([]int32, len(spans))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		x, y := &spans[a], &spans[b]
		if c := cmp.Compare(x.pos, y.pos); c != 0 {
			return c
		}
		if c := cmp.Compare(x.th, y.th); c != 0 {
			return c
		}
		return cmp.Compare(x.seq, y.seq)
	})
	var rec PlaceRecord
	var bhs []uint64
	for _, i := range order {
		s := spans[i]
		rec = PlaceRecord{ID: s.ref, Parent: parents[i], Position: s.pos, TokensHash: s.th, Seq: s.seq, Holders: rec.Holders[:0]}
		bhs = bhs[:0]
		for _, h := range holds[s.start:s.end] {
			bhs = append(bhs, h.bh)
		}
		for k := s.start; k < s.end; {
			w := holds[k].w
			start := k
			for k < s.end && holds[k].w == w {
				k++
			}
			rec.Holders = append(rec.Holders, HolderRecord{Worker: f.keys[w], BlockHashes: bhs[start-s.start : k-s.start : k-s.start]})
		}
		if !yield(&rec) {
			return
		}
	}
}
