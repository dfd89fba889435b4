package engine

import "fmt"

// Loader rebuilds an index from the place records of a frozen index (a
// snapshot), in the order [Frozen.Places] yields them. It recomputes what
// records do not carry: kids counts and which workers hold their blocks
// without holes (a worker whose every non-root place has its parent held is
// scored by bisection, whatever its history was).
//
// Loading is a bulk build, not a replay: places are laid in their slabs as
// they come, and the hash tables (each shard's, each worker's reverse map)
// are built in Finish one at a time, sized once, while each fits in cache.
type Loader struct {
	ix      *Index
	refs    []uint32 // by record ID: ref in the new index
	lastPos uint32
	pending [][]pendingBlock // by dense worker id: reverse-map pairs to insert
	lastKey WorkerKey
	lastID  uint32
	haveKey bool
}

type pendingBlock struct {
	bh  uint64
	ref uint32
}

// NewLoader returns a loader of an empty index.
func NewLoader() *Loader {
	return &Loader{ix: New(), refs: []uint32{0}}
}

// Add adds one place record. Records must come in position order with IDs
// 1, 2, 3...; a parent link that does not chain is dropped (its holders are
// then scored as possibly having holes). A malformed record is an error that
// names it, and leaves the loader unusable.
func (l *Loader) Add(rec *PlaceRecord) error {
	ix := l.ix
	switch {
	case int(rec.ID) != len(l.refs):
		return fmt.Errorf("place record %d: id %d, want ids 1, 2, 3... in order", len(l.refs), rec.ID)
	case len(rec.Holders) == 0:
		return fmt.Errorf("place %d: no holder", rec.ID)
	case rec.Position > MaxPosition:
		return fmt.Errorf("place %d: position %d out of range", rec.ID, rec.Position)
	case rec.Position < l.lastPos:
		return fmt.Errorf("place %d: position %d after position %d: records out of order", rec.ID, rec.Position, l.lastPos)
	}
	var parent uint32
	if rec.Parent != 0 {
		if rec.Parent >= rec.ID {
			return fmt.Errorf("place %d: parent %d does not come before it", rec.ID, rec.Parent)
		}
		ref := l.refs[rec.Parent]
		if pp := ix.placeOf(ref); pp.pos+1 == rec.Position && NextSeq(pp.seq, rec.TokensHash) == rec.Seq {
			parent = ref
		}
	}
	h := keyHash(rec.Position, rec.TokensHash)
	si := uint32(h >> (64 - shardBits))
	s := &ix.shards[si]
	local := s.allocPlace()
	s.places++
	p := s.place(local)
	*p = place{th: rec.TokensHash, seq: rec.Seq, pos: rec.Position, parent: parent, h: [2]holder{noHolder, noHolder}}
	ref := makeRef(si, local)
	for _, hr := range rec.Holders {
		if len(hr.BlockHashes) == 0 {
			return fmt.Errorf("place %d: worker %v holds it under no block hash", rec.ID, hr.Worker)
		}
		id, w, err := l.worker(hr.Worker)
		if err != nil {
			return fmt.Errorf("place %d: %w", rec.ID, err)
		}
		if !s.pushHolder(p, id) {
			return fmt.Errorf("place %d: worker %v listed twice", rec.ID, hr.Worker)
		}
		for i, bh := range hr.BlockHashes {
			l.pending[id] = append(l.pending[id], pendingBlock{bh: bh, ref: ref})
			if i > 0 {
				if w.dup == nil {
					w.dup = map[uint32]uint32{}
				}
				w.dup[ref]++
			}
		}
		ix.holderBlocks += len(hr.BlockHashes)
		if w.untracked {
			continue
		}
		switch {
		case rec.Position == 0:
			if rec.Seq != rec.TokensHash {
				ix.untrack(id, w)
			}
		case parent == 0 || !ix.holds(parent, id):
			ix.untrack(id, w)
		default:
			ix.shards[refShard(parent)].addKids(refLocal(parent), id, 1)
		}
	}
	l.refs = append(l.refs, ref)
	l.lastPos = rec.Position
	return nil
}

// worker returns the dense id of key, registering it when new. Holders come
// sorted by key in every record, so the last key is the likeliest.
func (l *Loader) worker(key WorkerKey) (uint32, *worker, error) {
	ix := l.ix
	if l.haveKey && key == l.lastKey {
		return l.lastID, ix.workers[l.lastID], nil
	}
	id, w := ix.worker(key)
	if w == nil {
		if len(ix.byKey) >= MaxWorkerKeys {
			return 0, nil, fmt.Errorf("more than %d worker keys", MaxWorkerKeys)
		}
		id, w = ix.addWorker(key)
		for len(l.pending) <= int(id) {
			l.pending = append(l.pending, nil)
		}
	}
	l.lastKey, l.lastID, l.haveKey = key, id, true
	return id, w, nil
}

// holds reports whether worker id holds place ref. Writer only.
func (ix *Index) holds(ref, id uint32) bool {
	ps := &ix.shards[refShard(ref)]
	for _, h := range ps.holders(ps.place(refLocal(ref))) {
		if h.wid() == id {
			return true
		}
	}
	return false
}

// Finish builds the hash tables, sets the counters (part of the state a
// snapshot keeps) and returns the index. It fails when two records name the
// same place or a worker holds one block hash twice. The loader must not be
// used afterwards.
func (l *Loader) Finish(c Counters) (*Index, error) {
	ix := l.ix
	l.ix = nil
	for si := range ix.shards {
		s := &ix.shards[si]
		if s.places == 0 {
			continue
		}
		s.table = make([]uint64, grownCap(s.places))
		for local := uint32(1); local < s.nextNew; local++ {
			p := s.place(local)
			fp := fingerprint(keyHash(p.pos, p.th))
			at, sibling, stop := s.find(p.pos, p.th, p.seq, fp)
			if at >= 0 {
				return nil, fmt.Errorf("place (position %d, local hash %d, seq %d) appears twice", p.pos, p.th, p.seq)
			}
			s.insertAt(stop, uint64(fp)<<32|uint64(local))
			if !sibling {
				s.entries++
			}
		}
	}
	for id, blocks := range l.pending {
		w := ix.workers[id]
		w.rev.slots = make([]revSlot, grownCap(len(blocks)))
		for _, b := range blocks {
			at, stop := w.rev.find(b.bh)
			if at >= 0 {
				return nil, fmt.Errorf("worker %v holds block %d twice", w.key, b.bh)
			}
			mk := mix64(b.bh)
			w.rev.insertAt(stop, revSlot{lo: uint32(mk), hi: uint32(mk >> 32), ref: b.ref})
			w.rev.n++
		}
		l.pending[id] = nil
	}
	ix.counters = c
	return ix, nil
}
