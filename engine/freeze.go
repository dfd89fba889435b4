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
	nextNew  [shardCount]uint32 // slots from here on were never used
	counters Counters
}

// PlaceRecord is one place of a frozen index: a (position, local hash,
// router seq) and who holds it under which block hashes. A snapshot holds
// nothing else: an entry is the set of places sharing (position, local hash).
type PlaceRecord struct {
	// ID is the place's ordinal in [Frozen.Places] order, from 1: a snapshot
	// need not store it.
	ID uint32
	// Parent is the ID of an earlier place this one may chain from, or 0. The
	// loader keeps the link only if the parent chains to this place (position
	// one less, seq = NextSeq(parent seq, TokensHash)). It lets a loaded index
	// know, without replaying history, which workers hold their blocks
	// without holes.
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
		f.nextNew[si] = s.nextNew
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
//
// Random memory access is what costs here, so the place slabs are read in
// order once, and the reverse maps are scattered into place order by a
// counting sort; only small arrays are then read at random.
func (f *Frozen) Places(yield func(*PlaceRecord) bool) {
	// Number every place slot densely: shard by shard, place by place.
	var base [shardCount + 1]int
	for si := range f.pages {
		base[si+1] = base[si] + len(f.pages[si])*pageSize
	}
	dense := func(ref uint32) int { return base[refShard(ref)] + int(refLocal(ref)) }
	type span struct {
		pos     uint32
		parent  uint32 // dense number of the parent slot + 1, or 0
		th, seq uint64
		d       int32 // dense number
	}
	spans := make([]span, 0, f.stats.Entries)
	for si := range f.pages {
		for pi, pg := range f.pages[si] {
			for li := range pg {
				p := &pg[li]
				local := pi*pageSize + li
				if local == 0 || local >= int(f.nextNew[si]) || p.h[0] == noHolder {
					continue
				}
				s := span{pos: p.pos, th: p.th, seq: p.seq, d: int32(base[si] + local)}
				if p.parent != 0 && p.pos > 0 {
					s.parent = uint32(dense(p.parent)) + 1
				}
				spans = append(spans, s)
			}
		}
	}
	// Counting sort of the reverse maps' (worker, block hash) pairs by place:
	// workers are visited in key order, so each place's holders come sorted.
	start := make([]int32, base[shardCount]+1)
	for _, slots := range f.revs {
		for _, s := range slots {
			if s.ref != 0 {
				start[dense(s.ref)+1]++
			}
		}
	}
	for d := 1; d < len(start); d++ {
		start[d] += start[d-1]
	}
	type hold struct {
		w  uint32
		bh uint64
	}
	holds := make([]hold, start[len(start)-1])
	next := slices.Clone(start[:len(start)-1])
	for w, slots := range f.revs {
		for _, s := range slots {
			if s.ref != 0 {
				d := dense(s.ref)
				holds[next[d]] = hold{w: uint32(w), bh: unmix64(s.mixed())}
				next[d]++
			}
		}
	}
	slices.SortFunc(spans, func(x, y span) int {
		if c := cmp.Compare(x.pos, y.pos); c != 0 {
			return c
		}
		if c := cmp.Compare(x.th, y.th); c != 0 {
			return c
		}
		return cmp.Compare(x.seq, y.seq)
	})
	// IDs are ordinals in this order; parents (lower positions) come first.
	id := make([]uint32, base[shardCount])
	for i, s := range spans {
		id[s.d] = uint32(i + 1)
	}
	var rec PlaceRecord
	var bhs []uint64
	for i, s := range spans {
		hs := holds[start[s.d]:start[s.d+1]]
		rec = PlaceRecord{ID: uint32(i + 1), Position: s.pos, TokensHash: s.th, Seq: s.seq, Holders: rec.Holders[:0]}
		if s.parent != 0 {
			// A stale link (its parent gone, the slot reused) is dropped by
			// the loader, which checks that the parent chains to this place.
			if pid := id[s.parent-1]; pid != 0 && pid < rec.ID {
				rec.Parent = pid
			}
		}
		bhs = bhs[:0]
		for _, h := range hs {
			bhs = append(bhs, h.bh)
		}
		for k := 0; k < len(hs); {
			w, from := hs[k].w, k
			for k < len(hs) && hs[k].w == w {
				k++
			}
			rec.Holders = append(rec.Holders, HolderRecord{Worker: f.keys[w], BlockHashes: bhs[from:k:k]})
		}
		if !yield(&rec) {
			return
		}
	}
}
