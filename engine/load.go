package engine

import "fmt"

// Loader rebuilds an index from the place records of a frozen index (a
// snapshot), in the order [Frozen.Places] yields them. It recomputes what
// records do not carry: kids counts and which workers hold their blocks
// without holes (a worker whose every non-root place has its parent held is
// scored by bisection, whatever its history was).
type Loader struct {
	ix      *Index
	refs    []uint32 // by record ID: ref in the new index
	lastPos uint32
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
	var ref uint32
	for _, hr := range rec.Holders {
		if len(hr.BlockHashes) == 0 {
			return fmt.Errorf("place %d: worker %v holds it under no block hash", rec.ID, hr.Worker)
		}
		id, w := ix.worker(hr.Worker)
		if w == nil {
			if len(ix.byKey) >= MaxWorkerKeys {
				return fmt.Errorf("place %d: more than %d worker keys", rec.ID, MaxWorkerKeys)
			}
			id, w = ix.addWorker(hr.Worker)
		}
		local, added := s.addHolder(rec.Position, rec.TokensHash, rec.Seq, fingerprint(h), id, parent)
		if !added {
			return fmt.Errorf("place %d: (position %d, local hash %d, seq %d) or its holder %v appears twice", rec.ID, rec.Position, rec.TokensHash, rec.Seq, hr.Worker)
		}
		ref = makeRef(si, local)
		for i, bh := range hr.BlockHashes {
			if _, held := w.rev.get(bh); held {
				return fmt.Errorf("place %d: worker %v holds block %d twice", rec.ID, hr.Worker, bh)
			}
			w.rev.put(bh, ref)
			ix.holderBlocks++
			if i > 0 {
				if w.dup == nil {
					w.dup = map[uint32]uint32{}
				}
				w.dup[ref]++
			}
		}
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

// Finish sets the counters (part of the state a snapshot keeps) and returns
// the index. The loader must not be used afterwards.
func (l *Loader) Finish(c Counters) *Index {
	ix := l.ix
	ix.counters = c
	l.ix, l.refs = nil, nil
	return ix
}
