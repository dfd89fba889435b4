package engine

// An event's blocks touch memory all over the index: a reverse-map slot, a
// shard table slot and a place each, nearly always cache misses. Applied one
// after another, the misses queue up. Before applying an event, the writer
// therefore computes every block's hashes, then, in tight loops with nothing
// else to do, loads the slots and places the event will need: the loads are
// independent, so the processor overlaps their misses, and the real work
// finds its memory in cache. This is the whole of kvidx's "prefetch": plain
// loads whose values are summed into ix.sink so they are not optimised away.

// prefetchStore computes the router seq and key hash of every block of a
// Stored event (returned in writer-owned buffers) and warms their memory.
func (ix *Index) prefetchStore(w *worker, ev *Event, pos, prevSeq uint64) (seqs, hashes []uint64) {
	seqs, hashes = ix.seqBuf[:0], ix.hashBuf[:0]
	seq := prevSeq
	for i, b := range ev.Blocks {
		switch {
		case i > 0 || ev.HasParent:
			seq = NextSeq(seq, b.TokensHash)
		case ev.HasStartPosition:
			seq = b.BlockHash
		default:
			seq = b.TokensHash
		}
		seqs = append(seqs, seq)
		hashes = append(hashes, keyHash(uint32(pos)+uint32(i), b.TokensHash))
	}
	ix.seqBuf, ix.hashBuf = seqs, hashes
	sink := ix.sink
	// A search runs on past its home slot, often into the next cache line:
	// both lines are loaded.
	if n := len(w.rev.slots); n > 0 {
		for _, b := range ev.Blocks {
			at := slotHome(uint32(mix64(b.BlockHash)>>32), n)
			sink += uint64(w.rev.slots[at].ref + w.rev.slots[wrapAdd(at, revSlotsPerLine, n)].ref)
		}
	}
	for _, h := range hashes {
		if s := &ix.shards[h>>(64-shardBits)]; len(s.table) > 0 {
			at := home(fingerprint(h), len(s.table))
			sink += s.table[at] + s.table[wrapAdd(at, tableSlotsPerLine, len(s.table))]
		}
	}
	for _, h := range hashes {
		s := &ix.shards[h>>(64-shardBits)]
		if len(s.table) == 0 {
			continue
		}
		// The place at the home slot is compared only if it is of the key.
		if slot := s.table[home(fingerprint(h), len(s.table))]; slot != 0 && uint32(slot>>32) == fingerprint(h) {
			sink += s.place(uint32(slot)).seq
		}
		// A new place comes off the head of the free list, or else is the
		// next never-used one (a growing index's: its line is written, then
		// read back at once, so a miss there waits).
		switch next := max(s.nextNew, 1); {
		case s.free != 0:
			sink += uint64(s.place(s.free).parent)
		case int(next>>pageBits) < len(s.pages):
			sink += uint64(s.place(next).parent)
		}
	}
	ix.sink = sink
	return seqs, hashes
}

// takeRemoved deletes a Removed event's block hashes from w's reverse map
// and returns, in the event's order, the place ref each was held at (0 for
// a hash w does not hold), having warmed the places and the table slots and
// parents that dropping them will touch. Deleting every hash before any
// holding is dropped is the same as one at a time, since dropping a holding
// never reads the reverse map; and each hash is searched for once, where a
// warming pass ahead of the deletions searched for it twice.
func (ix *Index) takeRemoved(w *worker, hashes []uint64) []uint32 {
	refs := ix.refBuf[:0]
	sink := ix.sink
	if n := len(w.rev.slots); n > 0 {
		// A deletion moves the run after its slot, often into the next line.
		for _, bh := range hashes {
			at := slotHome(uint32(mix64(bh)>>32), n)
			sink += uint64(w.rev.slots[at].ref + w.rev.slots[wrapAdd(at, revSlotsPerLine, n)].ref)
		}
	}
	for _, bh := range hashes {
		ref, _ := w.rev.del(bh)
		refs = append(refs, ref)
	}
	ix.refBuf = refs
	// The places are loaded in a loop of their own: a loop this short lets
	// the processor keep many more misses in flight than loads made between
	// deletions.
	for _, ref := range refs {
		if ref != 0 {
			sink += ix.placeOf(ref).seq
		}
	}
	// Emptied places leave their shard table, and parents lose a kid.
	for _, ref := range refs {
		if ref == 0 {
			continue
		}
		p := ix.placeOf(ref)
		s := &ix.shards[refShard(ref)]
		if size := len(s.table); size > 0 {
			at := home(fingerprint(keyHash(p.pos, p.th)), size)
			sink += s.table[at] + s.table[wrapAdd(at, tableSlotsPerLine, size)]
		}
		if p.parent != 0 {
			sink += uint64(ix.placeOf(p.parent).h[0])
		}
	}
	ix.sink = sink
	return refs
}

// Slots per 64-byte cache line, rounded down: a load this far past a slot
// lands in the line after it.
const (
	revSlotsPerLine   = 64 / revSlotBytes
	tableSlotsPerLine = 64 / 8
)

// A non-empty table has at least minTable slots, so wrapAdd's k <= n holds
// for both steps above; this fails to compile if that stops being true.
const _ = uint(minTable-tableSlotsPerLine) + uint(minTable-revSlotsPerLine)

// wrapAdd is (i + k) mod n for i < n and k <= n, without a division.
func wrapAdd(i, k, n int) int {
	if i += k; i >= n {
		i -= n
	}
	return i
}
