package engine

import (
	"math"
	"sync/atomic"
)

// matchScratch is one query's working memory, pooled so that a query
// allocates only its result.
type matchScratch struct {
	local []uint64 // the query's local hashes
	seqs  []uint64
	arena []uint32 // holder sets, appended one after another
	score []int32  // by dense id
	mark  []uint32 // by dense id: epoch stamp of the clean (hole-free) scorers
	tmp   []uint32 // by dense id: epoch stamps of short-lived sets
	cand  []uint32 // by dense id: candidate stamp
	gen   []uint32 // by dense id: the worker's linear word when the query read it
	chg   []uint32 // by dense id: the worker's changes word when its scan began
	count []int32  // by score: for ordering large results
	epoch uint32
}

// reset readies m for a query of queryBlocks blocks over workers dense ids.
func (m *matchScratch) reset(workers, queryBlocks int) {
	if len(m.mark) < workers {
		m.score = make([]int32, workers)
		m.mark = make([]uint32, workers)
		m.tmp = make([]uint32, workers)
		m.cand = make([]uint32, workers)
		m.gen = make([]uint32, workers)
		m.chg = make([]uint32, workers)
		m.epoch = 0
	}
	// A query takes at most epochsPerBlock epochs a block and 3 more (the
	// bisection's splits and leaves, the linear scans' positions, the
	// candidates, the clean set, the ordering). The stamps restart before a
	// query that could wrap them: after a wrap inside a query, stamps made
	// earlier in it would read as current or be cleared while in use.
	if uint64(m.epoch)+epochsPerBlock*uint64(queryBlocks)+8 > math.MaxUint32 {
		m.restart()
	}
	m.arena = m.arena[:0]
}

// epochsPerBlock bounds a query's epochs a block: 5 for the bisection, and
// one a position for each of the up to maxRescans+1 scans of both
// scanLinear calls (the workers with holes, and those that got one while
// the bisection ran).
const epochsPerBlock = 5 + 2*(maxRescans+1)

// restart clears every stamp, so that epochs can start again from 1.
func (m *matchScratch) restart() {
	clear(m.mark)
	clear(m.tmp)
	clear(m.cand)
	m.epoch = 0
}

// next returns a fresh epoch: marks stamped with older epochs read as unset.
// reset leaves room for a whole query's epochs, so they never wrap inside
// one.
func (m *matchScratch) next() uint32 {
	m.epoch++
	return m.epoch
}

// stamp stamps the ids of set in tmp with a fresh epoch and returns it:
// m.tmp[id] == the epoch then tells membership of set.
func (m *matchScratch) stamp(set []uint32) uint32 {
	in := m.next()
	for _, id := range set {
		m.tmp[id] = in
	}
	return in
}

// Match scores every worker key (or only the candidates, when candidates is
// not nil) by the number of leading blocks of localHashes it holds: worker w
// scores k when, for every i < k, it holds the block at position i with local
// hash localHashes[i] and router seq SeqHashes(localHashes)[i]. Workers scoring
// 0 are omitted; the result is sorted as by [SortScores] and never nil.
func (ix *Index) Match(localHashes []uint64, candidates []WorkerKey) []Score {
	out := []Score{}
	if len(localHashes) == 0 || (candidates != nil && len(candidates) == 0) {
		return out
	}
	ix.wmu.RLock()
	defer ix.wmu.RUnlock()
	m, _ := ix.scratch.Get().(*matchScratch)
	if m == nil {
		m = &matchScratch{}
	}
	defer ix.scratch.Put(m)
	m.reset(len(ix.keys), len(localHashes))
	var candEpoch uint32
	if candidates != nil {
		candEpoch = m.next()
		for _, c := range candidates {
			if id, ok := ix.byKey[c]; ok {
				m.cand[id] = candEpoch
			}
		}
	}
	m.local = localHashes
	defer func() { m.local = nil }()
	m.seqs = SeqHashes(m.seqs[:0], localHashes)
	n := len(localHashes)

	// Every scoring worker holds position 0; split them into workers without
	// holes (bisection is exact for them) and the rest (checked linearly),
	// reading each worker's linear word once.
	all := ix.holdersAt(m, 0)
	var s0, lin []uint32
	start := len(m.arena)
	for _, id := range all {
		if candEpoch != 0 && m.cand[id] != candEpoch {
			continue
		}
		m.score[id] = 1
		m.gen[id] = atomic.LoadUint32(&ix.linear[id])
		if m.gen[id]&1 == 0 {
			m.arena = append(m.arena, id)
		}
	}
	s0 = m.arena[start:]
	start = len(m.arena)
	for _, id := range all {
		if (candEpoch == 0 || m.cand[id] == candEpoch) && m.gen[id]&1 != 0 {
			m.arena = append(m.arena, id)
		}
	}
	lin = m.arena[start:]
	scorers := len(s0) + len(lin)
	if scorers == 0 {
		return out
	}
	if len(s0) > 0 && n > 1 {
		clean := m.next()
		for _, id := range s0 {
			m.mark[id] = clean
		}
		last := ix.cleanHoldersAt(m, n-1, clean)
		for _, id := range last {
			m.score[id] = int32(n)
		}
		ix.bisect(m, 0, s0, n-1, last)
		// A worker that may have got a hole while the bisection ran (a
		// block stored without its parent: the writer marks the worker
		// before it stores the block) can have been given positions it
		// never held. Its linear word has changed since it was read: it is
		// scored again, position by position. The word is read after every
		// probe, so a probe that saw such a block sees the change here.
		start := len(m.arena)
		for _, id := range s0 {
			if atomic.LoadUint32(&ix.linear[id]) != m.gen[id] {
				m.score[id] = 1
				m.arena = append(m.arena, id)
			}
		}
		if again := m.arena[start:]; len(again) > 0 {
			ix.scanLinear(m, again)
		}
	}
	if len(lin) > 0 {
		ix.scanLinear(m, lin)
	}
	// A worker scanned again from position 0 may no longer hold it.
	s0, lin = scoring(m, s0), scoring(m, lin)
	scorers = len(s0) + len(lin)
	out = make([]Score, 0, scorers)
	if scorers <= 16 {
		for _, set := range [][]uint32{s0, lin} {
			for _, id := range set {
				out = append(out, Score{Worker: ix.keys[id], MatchedBlocks: int(m.score[id])})
			}
		}
		SortScores(out)
		return out
	}
	return ix.orderScores(m, out, s0, lin, n)
}

// scoring keeps the ids of set with a score above 0, in place.
func scoring(m *matchScratch, set []uint32) []uint32 {
	k := 0
	for _, id := range set {
		if m.score[id] > 0 {
			set[k] = id
			k++
		}
	}
	return set[:k]
}

// holdersAt appends to the arena the dense ids holding the query's block at pos.
func (ix *Index) holdersAt(m *matchScratch, pos int) []uint32 {
	h := m.keyHash(pos)
	s := &ix.shards[h>>(64-shardBits)]
	s.mu.RLock()
	set := ix.holdersIn(m, pos, s, h)
	s.mu.RUnlock()
	return set
}

// keyHash is the key hash of the query's block at pos.
func (m *matchScratch) keyHash(pos int) uint64 { return keyHash(uint32(pos), m.local[pos]) }

// holdersIn is holdersAt with shard s (of key hash h) already read-locked.
func (ix *Index) holdersIn(m *matchScratch, pos int, s *shard, h uint64) []uint32 {
	start := len(m.arena)
	if local := s.lookup(uint32(pos), m.local[pos], m.seqs[pos], fingerprint(h)); local != 0 {
		m.arena = s.appendHolderIDs(m.arena, s.place(local))
	}
	return m.arena[start:]
}

// cleanHoldersAt is holdersAt restricted to ids stamped with epoch clean.
func (ix *Index) cleanHoldersAt(m *matchScratch, pos int, clean uint32) []uint32 {
	return ix.holdersMarked(m, pos, m.mark, clean)
}

// holdersMarked is holdersAt restricted to the ids whose marks are want.
func (ix *Index) holdersMarked(m *matchScratch, pos int, marks []uint32, want uint32) []uint32 {
	set := ix.holdersAt(m, pos)
	k := 0
	for _, id := range set {
		if marks[id] == want {
			set[k] = id
			k++
		}
	}
	m.arena = m.arena[:len(m.arena)-len(set)+k]
	return set[:k]
}

// bisect scores the workers without holes between two probed positions: a
// holds the query's block at lo, b (a subset of a) at hi. A worker without
// holes that holds position p holds every earlier one, so a worker's score is
// one past the last position it holds, and only ranges where the holder set
// shrinks need probing.
//
// Positions are probed at different moments, so a worker that loses its
// tail between two probes (without a hole: no linear word changes) can be
// in a later probe of a lower position's set and not in the higher's, or
// the other way round: the sets are kept nested by intersecting them, or
// sets of equal size but different members would be taken for equal and
// the workers of one of them never scored in this range.
func (ix *Index) bisect(m *matchScratch, lo int, a []uint32, hi int, b []uint32) {
	if len(a) == len(b) {
		return
	}
	if hi == lo+1 {
		in := m.stamp(b)
		for _, id := range a {
			if m.tmp[id] != in {
				m.score[id] = int32(lo + 1)
			}
		}
		return
	}
	mid := (lo + hi) / 2
	mset := ix.holdersWithin(m, mid, a)
	ix.bisect(m, lo, a, mid, mset)
	ix.bisect(m, mid, mset, hi, ix.within(m, b, mset))
}

// holdersWithin is holdersAt restricted to the ids in set.
func (ix *Index) holdersWithin(m *matchScratch, pos int, set []uint32) []uint32 {
	return ix.holdersMarked(m, pos, m.tmp, m.stamp(set))
}

// within appends to the arena the ids of a that are in set.
func (ix *Index) within(m *matchScratch, a, set []uint32) []uint32 {
	in := m.stamp(set)
	start := len(m.arena)
	for _, id := range a {
		if m.tmp[id] == in {
			m.arena = append(m.arena, id)
		}
	}
	return m.arena[start:]
}

// maxRescans bounds how often scanLinear scans workers that events keep
// changing before it scans them with the query's shards read-locked.
const maxRescans = 3

// scanLinear scores workers that may have holes by probing every position,
// from 0, until none of them is left. The positions are probed at
// different moments, so a worker that an event changed meanwhile could be
// given a prefix it never held at once (position 1 held before a removal,
// position 2 after a store): a worker whose changes word moved during its
// scan, or was odd (an event under way), is scanned again, and after
// maxRescans scans with the shards of the query's blocks read-locked, which
// no event can change meanwhile.
func (ix *Index) scanLinear(m *matchScratch, ids []uint32) {
	start := len(m.arena)
	m.arena = append(m.arena, ids...)
	todo := m.arena[start:]
	for try := 0; len(todo) > 0; try++ {
		if try == maxRescans {
			ix.scanLocked(m, todo)
			return
		}
		for _, id := range todo {
			m.chg[id] = atomic.LoadUint32(&ix.changes[id])
		}
		ix.scanPositions(m, todo, ix.holdersAt)
		k := 0
		for _, id := range todo {
			if c := atomic.LoadUint32(&ix.changes[id]); c != m.chg[id] || c&1 != 0 {
				todo[k] = id
				k++
			}
		}
		todo = todo[:k]
	}
}

// scanLocked is scanLinear's last resort: it read-locks the shards of the
// query's blocks, in shard order (a writer holds one shard lock at a time,
// so this cannot deadlock), and scans the workers once.
func (ix *Index) scanLocked(m *matchScratch, ids []uint32) {
	var locked uint64
	for pos := range m.seqs {
		locked |= 1 << (m.keyHash(pos) >> (64 - shardBits))
	}
	for si := range ix.shards {
		if locked&(1<<si) != 0 {
			ix.shards[si].mu.RLock()
		}
	}
	ix.scanPositions(m, ids, func(m *matchScratch, pos int) []uint32 {
		h := m.keyHash(pos)
		return ix.holdersIn(m, pos, &ix.shards[h>>(64-shardBits)], h)
	})
	for si := range ix.shards {
		if locked&(1<<si) != 0 {
			ix.shards[si].mu.RUnlock()
		}
	}
}

// scanPositions scores ids by the first position, from 0, whose holders
// (as holders returns them) lack them.
func (ix *Index) scanPositions(m *matchScratch, ids []uint32, holders func(*matchScratch, int) []uint32) {
	// Work on a copy: the caller still needs the full set.
	start := len(m.arena)
	m.arena = append(m.arena, ids...)
	alive := m.arena[start:]
	for pos := 0; pos < len(m.seqs) && len(alive) > 0; pos++ {
		in := m.stamp(holders(m, pos))
		k := 0
		for _, id := range alive {
			if m.tmp[id] == in {
				alive[k] = id
				k++
			} else {
				m.score[id] = int32(pos)
			}
		}
		alive = alive[:k]
	}
	for _, id := range alive {
		m.score[id] = int32(len(m.seqs))
	}
}

// orderScores sorts many scorers without comparisons: a counting sort by score
// over the registry's key order.
func (ix *Index) orderScores(m *matchScratch, out []Score, s0, lin []uint32, n int) []Score {
	in := m.next()
	if cap(m.count) < n+2 {
		m.count = make([]int32, n+2)
	}
	count := m.count[:n+2]
	clear(count)
	for _, set := range [][]uint32{s0, lin} {
		for _, id := range set {
			m.tmp[id] = in
			count[n-int(m.score[id])+1]++
		}
	}
	// count[k] becomes the first output slot of score n-k.
	for k := 1; k < len(count); k++ {
		count[k] += count[k-1]
	}
	out = out[:len(s0)+len(lin)]
	for _, id := range ix.order {
		if m.tmp[id] == in {
			k := n - int(m.score[id])
			out[count[k]] = Score{Worker: ix.keys[id], MatchedBlocks: int(m.score[id])}
			count[k]++
		}
	}
	return out
}
