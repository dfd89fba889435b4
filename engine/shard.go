package engine

import (
	"sync"
	"sync/atomic"
)

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

	// A holder packs a dense worker id (widBits) and its kids count (the rest).
	widBits  = 20
	widMask  = 1<<widBits - 1
	kidsOne  = 1 << widBits
	kidsMax  = 1<<(32-widBits) - 1
	noHolder = holder(^uint32(0))     // an empty inline holder slot
	overflow = holder(^uint32(0) - 1) // in h[1]: the holders live in shard.ovf[h[0]]
	// MaxWorkerKeys is how many worker keys the index holds at once: dense ids
	// must stay clear of the two markers above.
	MaxWorkerKeys = widMask - 1
)

// holder is one worker key's hold on a place: its dense worker id and its
// kids, the number of this worker's held places whose parent is this place.
// Kids are kept only while the worker's kids are tracked (see
// worker.untracked); past kidsMax the rest is counted in shard.bigKids.
// Queries read holders with atomic loads, because the writer updates kids
// without the shard lock (queries use only the id).
type holder uint32

func (h holder) wid() uint32  { return uint32(h) & widMask }
func (h holder) kids() uint32 { return uint32(h) >> widBits }

// place is one (position, local hash, router seq): the unit a worker holds.
// An entry is the set of places sharing (position, local hash); usually one.
type place struct {
	th, seq uint64
	pos     uint32
	// parent is the ref of the place this one chains from, as linked by a
	// worker whose kids are tracked; 0 when none has linked it. On a free
	// place it links the free list.
	parent uint32
	// h holds up to two holders inline (noHolder marks a free slot); with more,
	// h[1] is overflow and h[0] indexes the list in shard.ovf.
	h [2]holder
}

// set makes p the place (pos, th, seq), linked to parent, with no holder.
// It assigns field by field: a composite literal is built on the stack in
// 4- and 8-byte stores and copied out in 16-byte loads, which the processor
// cannot forward from those stores, and each such copy waits for them to
// reach the cache (in the loader, that copy took a sixth of its time).
func (p *place) set(pos uint32, th, seq uint64, parent uint32) {
	p.th, p.seq, p.pos, p.parent = th, seq, pos, parent
	p.h[0], p.h[1] = noHolder, noHolder
}

// shard is one lock's worth of the index.
//
// Its table maps (position, local hash) to places: one slot per place, a slot
// being fingerprint<<32 | place number, 0 for empty. Places of one entry hash
// alike, so they share a probe run, which is how the entry count is kept
// without a per-entry list. Linear probing with deletion by backward shift
// leaves no tombstones, and the table shrinks as well as grows, so churn does
// not grow it. Capacity is any size, not a power of two (homes come from a
// multiply-shift), so that the load stays between growLoad and shrinkLoad.
type shard struct {
	mu      sync.RWMutex
	table   []uint64
	places  int // slots in use: places alive
	entries int // distinct (position, local hash) among them
	pages   [][]place
	nextNew uint32 // next never-used place number (0 is never used)
	free    uint32 // head of the free-place list
	ovf     [][]holder
	ovfFree []uint32
	// at indexes overflow lists of bigHolders holders or more (by list,
	// then dense id) to each holder's position in its list: storing a block
	// that thousands of worker keys hold (a shared system prompt), dropping
	// it, and counting its kids would otherwise scan them all, and filling
	// the index with such keys took time quadratic in their number. Made
	// when a list is first searched at that size, kept in step by every
	// change, dropped below bigHolders/2 or a quarter of its peak (a Go
	// map keeps the size of its peak). Only the writer uses it.
	at map[uint32]*posIndex
	// bigKids counts kids beyond kidsMax, by place number<<32 | dense id.
	bigKids map[uint64]uint32
	// floor and pageFloor are the table size and slab page count reserved
	// (see Index.Reserve): the table does not shrink, nor compaction drop
	// pages, below them.
	floor, pageFloor int
	// spare is the table prepared for the next growth (see grower), asked
	// for when the table was asked long.
	spare spare[uint64]
	asked int
	_     [64]byte // keep neighbouring shards' locks off one cache line
}

func makeRef(si, local uint32) uint32 { return local<<shardBits | si }
func refShard(ref uint32) uint32      { return ref & (shardCount - 1) }
func refLocal(ref uint32) uint32      { return ref >> shardBits }

// keyHash mixes an entry key: its top shardBits bits choose the shard, bits
// 16..47 are the fingerprint that places a slot.
func keyHash(pos uint32, th uint64) uint64 {
	return mix64(th ^ uint64(pos)*0x9e3779b97f4a7c15)
}

func fingerprint(h uint64) uint32 { return uint32(h >> 16) }

// mix64 is the murmur3 finaliser: local and block hashes may be small or
// sequential (tests, other engines), so slots need well-spread bits.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// unmix64 inverts mix64 (each of its steps is invertible: a xorshift by 33
// of 64 bits is its own inverse, and odd multipliers have inverses mod 2^64).
func unmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0x9cb4b2f8129337db
	x ^= x >> 33
	x *= 0x4f74430c22a54005
	x ^= x >> 33
	return x
}

// home maps a 32-bit hash onto [0, size) without a modulo.
func home(h32 uint32, size int) int { return int(uint64(h32) * uint64(size) >> 32) }

// Open-addressing tables (shard tables and reverse maps) keep their load in
// [shrinkLoad, growLoad]: they grow to grownLoad (a growth factor near 1.8, so
// a table filling up copies each slot about once) and shrink to shrunkLoad.
//
// Shard tables run emptier than reverse maps. Nearly every block op inserts
// or deletes a slot in one, moving the rest of its probe run, and runs
// lengthen fast with load: in the steady-churn benchmark an insert moved 6.6
// slots at load 0.75 and 2.3 at 0.57. A slot there costs 8 bytes a place,
// where a reverse-map slot costs 12 a holder-block, so this is where memory
// buys the most time (7 % of apply time for 1.7 heap bytes a holder-block).
const (
	growLoad   = 0.90
	grownLoad  = 0.50
	shrinkLoad = 0.20
	shrunkLoad = 0.60
	minTable   = 16

	tableGrowLoad   = 0.75
	tableGrownLoad  = 0.45
	tableShrunkLoad = 0.50
)

// capFor returns the capacity that holds n items at the given load.
func capFor(n int, load float64) int { return max(minTable, int(float64(n)/load)+1) }

// Runs of an open-addressing table stay ordered by home, so an insert at
// the place a search stopped moves the rest of the run along by one, and a
// deletion moves it back: two memmoves, where swapping slot by slot took a
// branch per slot that the processor could not predict.

// runInsert puts v at t[i], moving t[i..e) (cyclically) along by one; t[e]
// must be empty.
func runInsert[T any](t []T, i, e int, v T) {
	if e >= i {
		copy(t[i+1:e+1], t[i:e])
	} else {
		copy(t[1:e+1], t[:e])
		t[0] = t[len(t)-1]
		copy(t[i+1:], t[i:len(t)-1])
	}
	t[i] = v
}

// runDelete removes t[i], moving t[i+1..e) (cyclically) back by one and
// emptying the slot before e.
func runDelete[T any](t []T, i, e int) {
	var empty T
	switch {
	case e > i:
		copy(t[i:e-1], t[i+1:e])
		t[e-1] = empty
	case e == 0:
		copy(t[i:], t[i+1:])
		t[len(t)-1] = empty
	default:
		copy(t[i:], t[i+1:])
		t[len(t)-1] = t[0]
		copy(t[:e-1], t[1:e])
		t[e-1] = empty
	}
}

// usedPages is how many of the shard's slab pages hold a place number ever
// used; the rest are reserved (see Index.Reserve).
func (s *shard) usedPages() int {
	if s.nextNew <= 1 {
		return 0
	}
	return int((s.nextNew-1)>>pageBits) + 1
}

func (s *shard) place(local uint32) *place {
	return &s.pages[local>>pageBits][local&(pageSize-1)]
}

func (s *shard) holders(p *place) []holder {
	switch {
	case p.h[1] == overflow:
		return s.ovf[p.h[0]]
	case p.h[1] != noHolder:
		return p.h[:2]
	case p.h[0] != noHolder:
		return p.h[:1]
	}
	return nil
}

// appendHolderIDs appends the dense ids of p's holders. Queries use it under
// the read lock: its loads are atomic because the writer updates kids,
// beside the ids, without the lock.
func (s *shard) appendHolderIDs(dst []uint32, p *place) []uint32 {
	load := func(h *holder) holder { return holder(atomic.LoadUint32((*uint32)(h))) }
	h0, h1 := load(&p.h[0]), load(&p.h[1])
	switch {
	case h1 == overflow:
		list := s.ovf[h0]
		for i := range list {
			dst = append(dst, load(&list[i]).wid())
		}
	case h1 != noHolder:
		dst = append(dst, h0.wid(), h1.wid())
	case h0 != noHolder:
		dst = append(dst, h0.wid())
	}
	return dst
}

// probeDist is how far slot i lies past home h in a table of size slots.
func probeDist(h, i, size int) int {
	if i >= h {
		return i - h
	}
	return i + size - h
}

// find scans the probe run of (pos, th) for the place with seq. It returns
// the place's slot (or -1), whether another place of the same entry exists,
// and the slot where a new place of this key belongs.
//
// The table is Robin Hood ordered: along a run, slots sit at non-decreasing
// distances from their homes... more exactly, no slot is nearer its home than
// the slot before it would allow; so a search stops at the first slot nearer
// its home than the searched key would be there, and places of one entry
// (same fingerprint, same home) are never passed.
func (s *shard) find(pos uint32, th, seq uint64, fp uint32) (at int, sibling bool, stop int) {
	at = -1
	size := len(s.table)
	if size == 0 {
		return -1, false, -1
	}
	for i, d := home(fp, size), 0; ; d++ {
		slot := s.table[i]
		if slot == 0 {
			return at, sibling, i
		}
		if sfp := uint32(slot >> 32); sfp == fp {
			if p := s.place(uint32(slot)); p.pos == pos && p.th == th {
				if p.seq == seq {
					at = i
				} else {
					sibling = true
				}
			}
		} else if probeDist(home(sfp, size), i, size) < d {
			return at, sibling, i
		}
		if i++; i == size {
			i = 0
		}
	}
}

// lookup returns the place number of (pos, th, seq), or 0. Queries call it
// under the read lock.
func (s *shard) lookup(pos uint32, th, seq uint64, fp uint32) uint32 {
	size := len(s.table)
	if size == 0 {
		return 0
	}
	for i, d := home(fp, size), 0; ; d++ {
		slot := s.table[i]
		if slot == 0 {
			return 0
		}
		if sfp := uint32(slot >> 32); sfp == fp {
			if p := s.place(uint32(slot)); p.pos == pos && p.th == th && p.seq == seq {
				return uint32(slot)
			}
		} else if probeDist(home(sfp, size), i, size) < d {
			return 0
		}
		if i++; i == size {
			i = 0
		}
	}
}

// insertAt puts slot at i, where find stopped.
func (s *shard) insertAt(i int, slot uint64) {
	e := i
	for s.table[e] != 0 {
		if e++; e == len(s.table) {
			e = 0
		}
	}
	runInsert(s.table, i, e, slot)
}

// placeSlot puts slot into its run, searching from i (its home) by Robin
// Hood swaps: a slot nearer its home gives way. Resizing uses it.
func (s *shard) placeSlot(i int, slot uint64) {
	size := len(s.table)
	for {
		cur := s.table[i]
		if cur == 0 {
			s.table[i] = slot
			return
		}
		if probeDist(home(uint32(cur>>32), size), i, size) < probeDist(home(uint32(slot>>32), size), i, size) {
			s.table[i], slot = slot, cur
		}
		if i++; i == size {
			i = 0
		}
	}
}

func (s *shard) resize(size int) { s.rehash(populated(make([]uint64, size))) }

// rehash moves the table's slots into table, which must be empty.
func (s *shard) rehash(table []uint64) {
	old := s.table
	s.table = table
	size := len(table)
	for _, slot := range old {
		if slot != 0 {
			s.placeSlot(home(uint32(slot>>32), size), slot)
		}
	}
}

// deleteSlot empties slot i and moves the rest of its run back by one: the
// run ends at an empty slot or at a slot in its home.
func (s *shard) deleteSlot(i int) {
	size := len(s.table)
	e := i + 1
	if e == size {
		e = 0
	}
	for s.table[e] != 0 && home(uint32(s.table[e]>>32), size) != e {
		if e++; e == size {
			e = 0
		}
	}
	runDelete(s.table, i, e)
}

// allocPlace takes a place number: a freed one, else the next never-used
// one, on a page from g's pool (g may be nil) or a new one.
func (s *shard) allocPlace(g *grower) uint32 {
	if s.free != 0 {
		local := s.free
		p := s.place(local)
		s.free, p.parent = p.parent, 0
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
		// A shard's first page is its own: an index that small (up to a
		// page a shard) is not worth memory made ahead.
		if len(s.pages) == 0 {
			g = nil
		}
		s.pages = append(s.pages, orFresh(g.page(), pageSize))
	}
	s.nextNew++
	return local
}

// addHolder makes wid a holder of place (pos, th, seq), creating the place
// (and with it, maybe, the entry) in the same critical section. It returns
// the place number and false when wid already held the place.
func (s *shard) addHolder(g *grower, pos uint32, th, seq uint64, fp uint32, wid uint32, parent uint32) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if table := roomFor(g, shardGrowth(), s.places, len(s.table), &s.asked, &s.spare); table != nil {
		s.rehash(table)
	}
	at, sibling, stop := s.find(pos, th, seq, fp)
	var local uint32
	if at >= 0 {
		local = uint32(s.table[at])
	} else {
		local = s.allocPlace(g)
		s.place(local).set(pos, th, seq, 0)
		s.insertAt(stop, uint64(fp)<<32|uint64(local))
		s.places++
		if !sibling {
			s.entries++
		}
	}
	p := s.place(local)
	if !s.pushHolder(p, wid) {
		return local, false
	}
	if parent != 0 {
		p.parent = parent
	}
	return local, true
}

// bigHolders is the length from which an overflow list's holders are
// found through shard.at rather than by a scan.
const bigHolders = 64

// posIndex is shard.at's index of one overflow list.
type posIndex struct {
	of   map[uint32]uint32 // dense id -> position in the list
	peak int               // the most holders indexed at once
}

// holderAt returns the position of wid among hs, p's holders, or -1.
func (s *shard) holderAt(p *place, hs []holder, wid uint32) int {
	if len(hs) < bigHolders {
		for i := range hs {
			if hs[i].wid() == wid {
				return i
			}
		}
		return -1
	}
	x := s.at[uint32(p.h[0])]
	if x == nil {
		x = &posIndex{of: make(map[uint32]uint32, len(hs)), peak: len(hs)}
		for i, h := range hs {
			x.of[h.wid()] = uint32(i)
		}
		if s.at == nil {
			s.at = map[uint32]*posIndex{}
		}
		s.at[uint32(p.h[0])] = x
	}
	if i, ok := x.of[wid]; ok {
		return int(i)
	}
	return -1
}

// pushHolder adds wid to p's holders, or reports false if it is one.
func (s *shard) pushHolder(p *place, wid uint32) bool {
	hs := s.holders(p)
	if s.holderAt(p, hs, wid) >= 0 {
		return false
	}
	switch {
	case len(hs) < 2:
		p.h[len(hs)] = holder(wid)
	case len(hs) == 2:
		list := make([]holder, 3, 4)
		copy(list, p.h[:])
		list[2] = holder(wid)
		p.h[0], p.h[1] = holder(s.newOverflow(list)), overflow
	default:
		s.ovf[p.h[0]] = append(hs, holder(wid))
		if x := s.at[uint32(p.h[0])]; x != nil {
			x.of[wid] = uint32(len(hs))
			x.peak = max(x.peak, len(hs)+1)
		}
	}
	return true
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

// removeHolder ends wid's hold on place local. A place that loses its last
// holder is deleted, and with the entry's last place the entry, all under
// the lock that emptied it. It returns the holder's kids and the place's
// parent link (read before the place is freed), and false when wid was not
// a holder.
func (s *shard) removeHolder(local uint32, wid uint32) (kids, parent uint32, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.place(local)
	hs := s.holders(p)
	i := s.holderAt(p, hs, wid)
	if i < 0 {
		return 0, 0, false
	}
	kids, parent = hs[i].kids(), p.parent
	if kids == kidsMax {
		key := uint64(local)<<32 | uint64(wid)
		kids += s.bigKids[key]
		delete(s.bigKids, key)
	}
	last := len(hs) - 1
	hs[i] = hs[last]
	if len(hs) > 2 {
		if x := s.at[uint32(p.h[0])]; x != nil {
			delete(x.of, wid)
			if i != last {
				x.of[hs[i].wid()] = uint32(i)
			}
			// Dropped, the index is made again at the list's size when
			// next needed: the rebuild is paid for by the removals since
			// the peak.
			if last < bigHolders/2 || last < x.peak/4 {
				delete(s.at, uint32(p.h[0]))
			}
		}
	}
	switch {
	case len(hs) > 3:
		s.ovf[p.h[0]] = hs[:last]
	case len(hs) == 3:
		idx := p.h[0]
		copy(p.h[:], hs[:2])
		s.ovf[idx] = nil
		s.ovfFree = append(s.ovfFree, uint32(idx))
	default:
		p.h[last] = noHolder
	}
	if p.h[0] == noHolder {
		s.deletePlace(local, p)
	}
	return kids, parent, true
}

// deletePlace removes an empty place from the table, counts the entry gone
// when no sibling place remains, and frees the place.
func (s *shard) deletePlace(local uint32, p *place) {
	// One scan of the probe run finds the place's slot and tells whether
	// another place of its entry remains (siblings share the run).
	fp := fingerprint(keyHash(p.pos, p.th))
	size := len(s.table)
	at, sibling := -1, false
	for i, d := home(fp, size), 0; ; d++ {
		slot := s.table[i]
		if slot == 0 {
			break
		}
		if sfp := uint32(slot >> 32); sfp == fp {
			if uint32(slot) == local {
				at = i
			} else if q := s.place(uint32(slot)); q.pos == p.pos && q.th == p.th {
				sibling = true
			}
		} else if probeDist(home(sfp, size), i, size) < d {
			break
		}
		if i++; i == size {
			i = 0
		}
	}
	if at < 0 {
		panic("kvidx engine: a live place is missing from its shard table")
	}
	s.deleteSlot(at)
	s.places--
	if !sibling {
		s.entries--
	}
	p.set(0, 0, 0, s.free)
	s.free = local
	if len(s.table) > max(minTable, s.floor) && float64(s.places) < shrinkLoad*float64(len(s.table)) {
		s.resize(max(s.floor, capFor(s.places, tableShrunkLoad)))
	}
}

// addKids adds delta (+1 or -1) to wid's kids count on place local and
// reports whether wid holds it. Writer only, without the lock: see holder.
func (s *shard) addKids(local, wid uint32, delta int32) bool {
	h := s.holderOf(local, wid)
	if h == nil {
		return false
	}
	key := uint64(local)<<32 | uint64(wid)
	switch {
	case delta > 0 && h.kids() == kidsMax:
		s.addBigKid(key)
	case delta > 0:
		atomic.StoreUint32((*uint32)(h), uint32(*h)+kidsOne)
	case s.bigKids[key] > 0:
		if s.bigKids[key]--; s.bigKids[key] == 0 {
			delete(s.bigKids, key)
		}
	default:
		atomic.StoreUint32((*uint32)(h), uint32(*h)-kidsOne)
	}
	return true
}

// addKidUnshared is addKids(local, wid, 1) for an index no query can see
// yet (the loader's): a plain store, where addKids's atomic store is a
// locked instruction that waits for every store before it, and the loader
// has a store in flight to a reverse-map list for each block. It reports
// whether wid holds the place.
func (s *shard) addKidUnshared(local, wid uint32) bool {
	h := s.holderOf(local, wid)
	switch {
	case h == nil:
		return false
	case h.kids() == kidsMax:
		s.addBigKid(uint64(local)<<32 | uint64(wid))
	default:
		*h += kidsOne
	}
	return true
}

// holderOf returns wid's holder on place local, or nil.
func (s *shard) holderOf(local, wid uint32) *holder {
	p := s.place(local)
	hs := s.holders(p)
	if i := s.holderAt(p, hs, wid); i >= 0 {
		return &hs[i]
	}
	return nil
}

// addBigKid counts one kid beyond kidsMax for key (place number<<32 | id).
func (s *shard) addBigKid(key uint64) {
	if s.bigKids == nil {
		s.bigKids = map[uint64]uint32{}
	}
	s.bigKids[key]++
}

// holderKids is wid's full kids count on place local (for Verify).
func (s *shard) holderKids(local uint32, h holder) uint32 {
	return h.kids() + s.bigKids[uint64(local)<<32|uint64(h.wid())]
}
