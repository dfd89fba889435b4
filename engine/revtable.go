package engine

// revTable maps one worker key's block hashes to the places it holds them at.
// Open addressing with linear probing over two parallel arrays (12 bytes a
// slot, far below a Go map's per-entry cost), deletion by backward shift so
// churn leaves no tombstones; it shrinks when mostly empty.
type revTable struct {
	keys []uint64
	refs []uint32 // place ref; 0 marks an empty slot
	n    int
}

const revMinSize = 8

func (t *revTable) home(key uint64) uint64 { return mix64(key) & uint64(len(t.keys)-1) }

func (t *revTable) get(key uint64) (uint32, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.keys) - 1)
	for i := t.home(key); ; i = (i + 1) & mask {
		if t.refs[i] == 0 {
			return 0, false
		}
		if t.keys[i] == key {
			return t.refs[i], true
		}
	}
}

// put sets key's place ref, adding the key when new.
func (t *revTable) put(key uint64, ref uint32) {
	if (t.n+1)*4 > len(t.keys)*3 {
		t.resize(max(revMinSize, 2*len(t.keys)))
	}
	mask := uint64(len(t.keys) - 1)
	i := t.home(key)
	for t.refs[i] != 0 && t.keys[i] != key {
		i = (i + 1) & mask
	}
	if t.refs[i] == 0 {
		t.n++
	}
	t.keys[i], t.refs[i] = key, ref
}

// del removes key and returns its ref.
func (t *revTable) del(key uint64) (uint32, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.keys) - 1)
	i := t.home(key)
	for t.keys[i] != key || t.refs[i] == 0 {
		if t.refs[i] == 0 {
			return 0, false
		}
		i = (i + 1) & mask
	}
	ref := t.refs[i]
	for j := (i + 1) & mask; t.refs[j] != 0; j = (j + 1) & mask {
		h := t.home(t.keys[j])
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.keys[i], t.refs[i] = t.keys[j], t.refs[j]
			i = j
		}
	}
	t.keys[i], t.refs[i] = 0, 0
	t.n--
	if len(t.keys) > revMinSize && t.n < len(t.keys)/8 {
		t.resize(len(t.keys) / 2)
	}
	return ref, true
}

func (t *revTable) resize(size int) {
	keys, refs := t.keys, t.refs
	t.keys, t.refs = make([]uint64, size), make([]uint32, size)
	mask := uint64(size - 1)
	for j, ref := range refs {
		if ref == 0 {
			continue
		}
		i := t.home(keys[j])
		for t.refs[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.refs[i] = keys[j], ref
	}
}

// each calls fn for every (block hash, ref) pair.
func (t *revTable) each(fn func(key uint64, ref uint32)) {
	for i, ref := range t.refs {
		if ref != 0 {
			fn(t.keys[i], ref)
		}
	}
}
