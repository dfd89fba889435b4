package workload

// lru is one simulated worker's KV cache: block hashes in recency order, with
// O(1) touch and eviction. The recency list is intrusive, over a slice of
// nodes linked by index, and the hash → node index is an open-addressing
// table without tombstones, so the cache allocates only when it grows and its
// memory stays flat under churn.
type lru struct {
	nodes []lruNode // nodes[0] is the sentinel: next = most recent, prev = least recent
	free  int32     // first free node, linked through next; 0 = none
	n     int       // cached blocks
	slots []lruSlot // linear probing, backward-shift deletion; node 0 = empty
	shift uint      // 64 - log2(len(slots))
}

type lruNode struct {
	hash       uint64
	prev, next int32
}

type lruSlot struct {
	hash uint64
	node int32
}

// newLRU returns an empty cache expecting about sizeHint blocks.
func newLRU(sizeHint int) *lru {
	// Room for a request's blocks beyond the capacity, before eviction.
	sizeHint = min(max(sizeHint, 8), 1<<20)
	sizeHint += sizeHint / 8
	c := &lru{nodes: make([]lruNode, 1, sizeHint+1)}
	c.resize(sizeHint)
	return c
}

// len returns the number of cached blocks.
func (c *lru) len() int { return c.n }

// contains reports whether hash is cached, without touching it.
func (c *lru) contains(hash uint64) bool {
	_, ok := c.find(hash)
	return ok
}

// touch makes hash the most recently used block, inserting it if missing, and
// reports whether it was already cached.
func (c *lru) touch(hash uint64) (hit bool) {
	i, ok := c.find(hash)
	if ok {
		n := c.slots[i].node
		c.unlink(n)
		c.pushFront(n)
		return true
	}
	n := c.free
	if n != 0 {
		c.free = c.nodes[n].next
	} else {
		n = int32(len(c.nodes))
		c.nodes = append(c.nodes, lruNode{})
	}
	c.nodes[n].hash = hash
	c.pushFront(n)
	c.slots[i] = lruSlot{hash: hash, node: n}
	c.n++
	if 4*c.n > 3*len(c.slots) { // keep the load factor <= 3/4
		c.resize(c.n)
	}
	return false
}

// evictOldest removes the least recently used block and returns its hash.
// The cache must not be empty.
func (c *lru) evictOldest() uint64 {
	n := c.nodes[0].prev
	h := c.nodes[n].hash
	c.unlink(n)
	c.nodes[n] = lruNode{next: c.free}
	c.free = n
	i, _ := c.find(h)
	c.deleteSlot(i)
	c.n--
	return h
}

// appendOldestFirst appends the cached hashes from least to most recently used.
func (c *lru) appendOldestFirst(dst []uint64) []uint64 {
	for n := c.nodes[0].prev; n != 0; n = c.nodes[n].prev {
		dst = append(dst, c.nodes[n].hash)
	}
	return dst
}

func (c *lru) unlink(n int32) {
	p, x := c.nodes[n].prev, c.nodes[n].next
	c.nodes[p].next = x
	c.nodes[x].prev = p
}

func (c *lru) pushFront(n int32) {
	first := c.nodes[0].next
	c.nodes[n].prev = 0
	c.nodes[n].next = first
	c.nodes[first].prev = n
	c.nodes[0].next = n
}

// home returns hash's preferred slot (Fibonacci hashing).
func (c *lru) home(hash uint64) int {
	return int((hash * 0x9e3779b97f4a7c15) >> c.shift)
}

// find returns hash's slot and true, or the empty slot where it would go and false.
func (c *lru) find(hash uint64) (int, bool) {
	mask := len(c.slots) - 1
	for i := c.home(hash); ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.node == 0 {
			return i, false
		}
		if s.hash == hash {
			return i, true
		}
	}
}

// deleteSlot empties slot i, shifting back the entries of its probe run.
func (c *lru) deleteSlot(i int) {
	mask := len(c.slots) - 1
	for j := (i + 1) & mask; c.slots[j].node != 0; j = (j + 1) & mask {
		k := c.home(c.slots[j].hash)
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (i < j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		c.slots[i] = c.slots[j]
		i = j
	}
	c.slots[i] = lruSlot{}
}

// resize rebuilds the table with room for more than n entries at load <= 3/4.
func (c *lru) resize(n int) {
	size, bits := 16, uint(4)
	for 3*size <= 4*n {
		size, bits = size*2, bits+1
	}
	old := c.slots
	c.slots, c.shift = make([]lruSlot, size), 64-bits
	for _, s := range old {
		if s.node != 0 {
			i, _ := c.find(s.hash)
			c.slots[i] = s
		}
	}
}
