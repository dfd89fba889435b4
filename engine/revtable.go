package engine

// revTable maps one worker key's block hashes to the places it holds them at.
// Robin Hood open addressing over packed 12-byte slots (far below a Go map's
// per-entry cost), deletion by backward shift so churn leaves no tombstones;
// it grows and shrinks to keep its load between shrinkLoad and growLoad.
type revTable struct {
	slots []revSlot
	n     int
	floor int // reserved size: no shrinking below it (see Index.Reserve)
}

// revSlot is a mixed block hash (mix64 of it: a bijection, so slots hash by
// their own bits and probing never rehashes) split in two halves, keeping the
// slot at 12 bytes, and its place ref; ref 0 marks an empty slot.
type revSlot struct {
	lo, hi, ref uint32
}

func (s revSlot) mixed() uint64 { return uint64(s.hi)<<32 | uint64(s.lo) }

// slotHome is the home of a slot holding mixed key hi<<32|lo.
func slotHome(hi uint32, size int) int { return home(hi, size) }

// find returns the slot holding key, or -1 and the slot where key belongs.
func (t *revTable) find(key uint64) (at, stop int) { return t.findMixed(mix64(key)) }

// findMixed is find for a key already mixed.
func (t *revTable) findMixed(mk uint64) (at, stop int) {
	size := len(t.slots)
	if size == 0 {
		return -1, -1
	}
	lo, hi := uint32(mk), uint32(mk>>32)
	for i, d := slotHome(hi, size), 0; ; d++ {
		s := &t.slots[i]
		if s.ref == 0 {
			return -1, i
		}
		if s.lo == lo && s.hi == hi {
			return i, -1
		}
		if probeDist(slotHome(s.hi, size), i, size) < d {
			return -1, i
		}
		if i++; i == size {
			i = 0
		}
	}
}

func (t *revTable) get(key uint64) (uint32, bool) {
	if at, _ := t.find(key); at >= 0 {
		return t.slots[at].ref, true
	}
	return 0, false
}

// insertAt puts s at i, where findMixed stopped.
func (t *revTable) insertAt(i int, s revSlot) {
	e := i
	for t.slots[e].ref != 0 {
		if e++; e == len(t.slots) {
			e = 0
		}
	}
	runInsert(t.slots, i, e, s)
}

// placeSlot puts s into its run, searching from i (its home) by Robin Hood
// swaps. Resizing uses it.
func (t *revTable) placeSlot(i int, s revSlot) {
	size := len(t.slots)
	sd := probeDist(slotHome(s.hi, size), i, size)
	for {
		cur := t.slots[i]
		if cur.ref == 0 {
			t.slots[i] = s
			return
		}
		if cd := probeDist(slotHome(cur.hi, size), i, size); cd < sd {
			t.slots[i], s, sd = s, cur, cd
		}
		if i++; i == size {
			i = 0
		}
		sd++
	}
}

// del removes key and returns its ref.
func (t *revTable) del(key uint64) (uint32, bool) {
	i, _ := t.find(key)
	if i < 0 {
		return 0, false
	}
	ref := t.slots[i].ref
	size := len(t.slots)
	e := i + 1
	if e == size {
		e = 0
	}
	for t.slots[e].ref != 0 && slotHome(t.slots[e].hi, size) != e {
		if e++; e == size {
			e = 0
		}
	}
	runDelete(t.slots, i, e)
	t.n--
	if size > max(minTable, t.floor) && float64(t.n) < shrinkLoad*float64(size) {
		t.resize(max(t.floor, capFor(t.n, shrunkLoad)))
	}
	return ref, true
}

func (t *revTable) resize(size int) { t.rehash(populated(make([]revSlot, size))) }

// rehash moves the map's slots into slots, which must be empty.
func (t *revTable) rehash(slots []revSlot) {
	old := t.slots
	t.slots = slots
	size := len(slots)
	for _, s := range old {
		if s.ref != 0 {
			t.placeSlot(slotHome(s.hi, size), s)
		}
	}
}

// each calls fn for every (block hash, ref) pair.
func (t *revTable) each(fn func(key uint64, ref uint32)) {
	for _, s := range t.slots {
		if s.ref != 0 {
			fn(unmix64(s.mixed()), s.ref)
		}
	}
}
