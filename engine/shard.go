package engine

import "sync"

// The index is split into shardCount shards by a hash of (position, local hash).
// Each shard owns its entries, their places and their holders under one RWMutex,
// so an entry is created, changed and deleted in one critical section.
const (
	shardBits  = 6
	shardCount = 1 << shardBits
	pageBits   = 10
	pageSize   = 1 << pageBits
	// maxLocal bounds a shard's place numbers so that a ref fits in 32 bits.
	maxLocal = 1<<(32-shardBits) - 1
	// inlineHolders is how many holders a place keeps without an overflow list.
	inlineHolders = 2
)

// holder is one worker key's hold on a place.
type holder struct {
	wid uint32 // dense worker id
	// kids counts this worker's held places whose parent is this place. It is
	// kept only while the worker's kids are tracked (see worker.untracked).
	kids uint32
}

// place is one (position, local hash, router seq): the unit a worker holds.
// Places of one entry (same position and local hash, different seqs) form a
// list through next; the entry table points at the list's head.
type place struct {
	th, seq uint64
	pos     uint32
	// parent is the ref of the place this one chains from, as linked by a
	// worker whose kids are tracked; 0 when no such worker has linked it.
	parent uint32
	next   uint32 // next place of the entry, or next free place
	n      uint32 // number of holders
	// h holds the holders when n <= inlineHolders; above that h[0].wid is the
	// index of the overflow list in shard.ovf.
	h [inlineHolders]holder
}

// shard is one lock's worth of the index.
type shard struct {
	mu sync.RWMutex
	// table maps (position, local hash) to the entry's head place. A slot is
	// fingerprint<<32 | local place number; 0 is empty. Linear probing,
	// deletion by backward shift: no tombstones, so churn does not grow it.
	table   []uint64
	entries int
	pages   [][]place // place number l lives at pages[l>>pageBits][l&(pageSize-1)]; 0 is unused
	places  int       // places in use
	nextNew uint32    // next never-used place number
	free    uint32    // head of the free-place list
	ovf     [][]holder
	ovfFree []uint32
	_       [64]byte // keep neighbouring shards' locks off one cache line
}

func makeRef(si, local uint32) uint32 { return local<<shardBits | si }
func refShard(ref uint32) uint32      { return ref & (shardCount - 1) }
func refLocal(ref uint32) uint32      { return ref >> shardBits }

// keyHash mixes an entry key. Its top shardBits bits choose the shard; bits
// 32.. give the fingerprint and the home slot.
func keyHash(pos uint32, th uint64) uint64 {
	return mix64(th ^ uint64(pos)*0x9e3779b97f4a7c15)
}

// mix64 is the murmur3 finaliser: local hashes may be small or sequential
// (tests, other engines), so slots need well-spread bits.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func (s *shard) place(local uint32) *place {
	return &s.pages[local>>pageBits][local&(pageSize-1)]
}

func (s *shard) holders(p *place) []holder {
	if p.n <= inlineHolders {
		return p.h[:p.n]
	}
	return s.ovf[p.h[0].wid]
}

// lookupEntry returns the slot and head place of entry (pos, th), or slot -1.
func (s *shard) lookupEntry(pos uint32, th uint64, h uint64) (int, uint32) {
	if len(s.table) == 0 {
		return -1, 0
	}
	fp := uint32(h >> 32)
	mask := uint64(len(s.table) - 1)
	for i := uint64(fp) & mask; ; i = (i + 1) & mask {
		slot := s.table[i]
		if slot == 0 {
			return -1, 0
		}
		if uint32(slot>>32) == fp {
			local := uint32(slot)
			if p := s.place(local); p.pos == pos && p.th == th {
				return int(i), local
			}
		}
	}
}

// lookupPlace returns the place number of (pos, th, seq), or 0.
func (s *shard) lookupPlace(pos uint32, th, seq uint64, h uint64) uint32 {
	_, local := s.lookupEntry(pos, th, h)
	for local != 0 {
		p := s.place(local)
		if p.seq == seq {
			return local
		}
		local = p.next
	}
	return 0
}

func (s *shard) insertSlot(slot uint64) {
	mask := uint64(len(s.table) - 1)
	i := (slot >> 32) & mask
	for s.table[i] != 0 {
		i = (i + 1) & mask
	}
	s.table[i] = slot
}

func (s *shard) resize(size int) {
	old := s.table
	s.table = make([]uint64, size)
	for _, slot := range old {
		if slot != 0 {
			s.insertSlot(slot)
		}
	}
}

// deleteSlot empties slot i and shifts later members of its probe run back.
func (s *shard) deleteSlot(i uint64) {
	mask := uint64(len(s.table) - 1)
	for j := (i + 1) & mask; s.table[j] != 0; j = (j + 1) & mask {
		home := (s.table[j] >> 32) & mask
		// Move slot j into the hole at i unless its home lies in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.table[i] = s.table[j]
			i = j
		}
	}
	s.table[i] = 0
	s.entries--
	if len(s.table) > 64 && s.entries < len(s.table)/8 {
		s.resize(len(s.table) / 2)
	}
}

func (s *shard) allocPlace() uint32 {
	if s.free != 0 {
		local := s.free
		p := s.place(local)
		s.free, p.next = p.next, 0
		s.places++
		return local
	}
	if s.nextNew == 0 {
		s.nextNew = 1
	}
	local := s.nextNew
	if local > maxLocal {
		panic("kvidx engine: shard place numbers exhausted")
	}
	if int(local>>pageBits) == len(s.pages) {
		s.pages = append(s.pages, make([]place, pageSize))
	}
	s.nextNew++
	s.places++
	return local
}

func (s *shard) freePlace(local uint32) {
	p := s.place(local)
	*p = place{next: s.free}
	s.free = local
	s.places--
}

// addHolder makes wid a holder of place (pos, th, seq), creating the place and
// its entry when needed, in one critical section. It returns the place number
// and false when wid already held the place.
func (s *shard) addHolder(pos uint32, th, seq uint64, h uint64, wid uint32, parent uint32) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, head := s.lookupEntry(pos, th, h)
	local := head
	for local != 0 && s.place(local).seq != seq {
		local = s.place(local).next
	}
	if local == 0 {
		local = s.allocPlace()
		p := s.place(local)
		p.th, p.seq, p.pos = th, seq, pos
		if slot >= 0 {
			// The entry exists: link the new place behind its head.
			hp := s.place(head)
			p.next, hp.next = hp.next, local
		} else {
			if (s.entries+1)*4 > len(s.table)*3 {
				s.resize(max(64, 2*len(s.table)))
			}
			s.insertSlot(h>>32<<32 | uint64(local))
			s.entries++
		}
	}
	p := s.place(local)
	for _, hd := range s.holders(p) {
		if hd.wid == wid {
			return local, false
		}
	}
	switch {
	case p.n < inlineHolders:
		p.h[p.n] = holder{wid: wid}
	case p.n == inlineHolders:
		list := make([]holder, inlineHolders+1, 2*inlineHolders)
		copy(list, p.h[:])
		list[inlineHolders] = holder{wid: wid}
		p.h[0].wid = s.newOverflow(list)
	default:
		s.ovf[p.h[0].wid] = append(s.ovf[p.h[0].wid], holder{wid: wid})
	}
	p.n++
	if parent != 0 {
		p.parent = parent
	}
	return local, true
}

func (s *shard) newOverflow(list []holder) uint32 {
	if n := len(s.ovfFree); n > 0 {
		i := s.ovfFree[n-1]
		s.ovfFree = s.ovfFree[:n-1]
		s.ovf[i] = list
		return i
	}
	s.ovf = append(s.ovf, list)
	return uint32(len(s.ovf) - 1)
}

// removeHolder ends wid's hold on place local. When the place loses its last
// holder it is unlinked, and when its entry loses its last place the entry is
// deleted, all under the lock that emptied it. It returns the holder's kids
// and the place's parent link (read before the place can be freed), and
// false when wid was not a holder.
func (s *shard) removeHolder(local uint32, wid uint32) (kids, parent uint32, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.place(local)
	hs := s.holders(p)
	i := 0
	for i < len(hs) && hs[i].wid != wid {
		i++
	}
	if i == len(hs) {
		return 0, 0, false
	}
	kids, parent = hs[i].kids, p.parent
	last := len(hs) - 1
	hs[i] = hs[last]
	switch {
	case p.n > inlineHolders+1:
		s.ovf[p.h[0].wid] = hs[:last]
	case p.n == inlineHolders+1:
		idx := p.h[0].wid
		copy(p.h[:], hs[:inlineHolders])
		s.ovf[idx] = nil
		s.ovfFree = append(s.ovfFree, idx)
	default:
		p.h[last] = holder{}
	}
	p.n--
	if p.n == 0 {
		s.unlinkPlace(local, p)
	}
	return kids, parent, true
}

// unlinkPlace removes an empty place from its entry, deleting the entry with
// its last place, and frees it.
func (s *shard) unlinkPlace(local uint32, p *place) {
	h := keyHash(p.pos, p.th)
	slot, head := s.lookupEntry(p.pos, p.th, h)
	switch {
	case head == local && p.next == 0:
		s.deleteSlot(uint64(slot))
	case head == local:
		s.table[slot] = s.table[slot]>>32<<32 | uint64(p.next)
	default:
		prev := s.place(head)
		for prev.next != local {
			prev = s.place(prev.next)
		}
		prev.next = p.next
	}
	s.freePlace(local)
}

// addKids adds delta to wid's kids count on place local and reports whether
// wid holds it.
func (s *shard) addKids(local, wid uint32, delta int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := s.holders(s.place(local))
	for i := range hs {
		if hs[i].wid == wid {
			hs[i].kids = uint32(int32(hs[i].kids) + delta)
			return true
		}
	}
	return false
}
