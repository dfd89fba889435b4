package engine

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

// Frozen is an immutable copy of an index's state between two events: what a
// snapshot writes. [Index.Freeze] takes it under the writer lock with a few
// slice copies, so event application pauses only for that; queries never
// pause. Everything else (grouping, sorting) happens when the copy is read,
// on the reader's goroutine (and, for a large copy, on one more goroutine a
// processor).
type Frozen struct {
	stats    Stats
	keys     []WorkerKey // by frozen worker index
	revs     [][]revSlot // by frozen worker index
	blocks   []int       // by frozen worker index: slots in use in revs
	pages    [shardCount][][]place
	nextNew  [shardCount]uint32 // slots from here on were never used
	counters Counters
	pause    time.Duration // how long Freeze held the writer lock
	scratch  placesScratch // reused by every Places call on this copy
	parts    int           // goroutines of Places' pair passes; 0: placesParts's choice (tests set it)
}

// placesScratch is Places' working memory, kept with the copy (and with it
// across Freeze and Release) so that periodic snapshots do not fault in
// fresh memory each time.
type placesScratch struct {
	perPos           []int32
	distinct         []uint32
	ord, start, fill []int32
	ords             []int32
	counts, bstart   []int32
	spans            []span
	holds, bucket    []hold
	bhs              []uint64
	holders          []HolderRecord
}

type span struct {
	pos     uint32
	parent  int32 // dense number of the parent slot, or -1; then its ordinal, or 0
	th, seq uint64
}

// hold is one (worker, block hash) pair of a place, o being the place's
// output ordinal (it fills what would be padding).
type hold struct {
	w, o uint32
	bh   uint64
}

// reserve makes room in the scratch arrays of Places' later passes for
// holderBlocks pairs, and returns a channel closed once that memory is
// faulted in. Fresh memory is what a process's first snapshot
// waits on here (see populated): the other goroutine faults it in on the
// other core, idle while Places runs its first passes (the snapshot
// writer's goroutine waits for chunks then).
func (sc *placesScratch) reserve(holderBlocks int) <-chan struct{} {
	var fresh []func()
	if cap(sc.holds) < holderBlocks {
		sc.holds = make([]hold, 0, holderBlocks)
		fresh = append(fresh, func() { touched(populated(sc.holds), holdBytes) })
	}
	if cap(sc.ords) < holderBlocks {
		sc.ords = make([]int32, 0, holderBlocks)
		fresh = append(fresh, func() { touched(populated(sc.ords), 4) })
	}
	done := make(chan struct{})
	if len(fresh) == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		for _, fn := range fresh {
			fn()
		}
	}()
	return done
}

// resized returns buf with length n, reusing its memory when it suffices;
// zero says whether the contents must be zeroed.
func resized[T any](buf []T, n int, zero bool) []T {
	if cap(buf) < n {
		return populated(make([]T, n))
	}
	buf = buf[:n]
	if zero {
		clear(buf)
	}
	return buf
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
	// WorkerIndex is Worker's index in [Frozen.Workers], set by
	// [Frozen.Places] (so a writer needs no map); the Loader ignores it.
	WorkerIndex uint32
}

// Freeze returns a consistent copy of the index as of the last applied event.
// Event application waits while it copies; queries do not. The copy reuses
// the memory of the last copy given back with [Frozen.Release], so that
// periodic snapshots neither fault in fresh pages nor feed the collector;
// when there is none, or the index has grown, Freeze first makes room
// without blocking events (see [Index.PrepareFreeze]).
func (ix *Index) Freeze() *Frozen {
	// The copy this call prepared is its own until returned: two Freezes at
	// once each copy into theirs.
	f := ix.prepare()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	start := time.Now()
	defer func() { f.pause = time.Since(start) }()
	f.stats = Stats{Entries: ix.entries(), HolderBlocks: ix.holderBlocks, WorkerKeys: len(ix.byKey), Counters: ix.counters}
	f.counters = ix.counters
	f.keys, f.blocks = f.keys[:0], f.blocks[:0]
	revs := f.revs
	f.revs = f.revs[:0]
	for i, id := range ix.order {
		w := ix.workers[id]
		f.keys = append(f.keys, w.key)
		f.blocks = append(f.blocks, w.rev.n)
		var buf []revSlot
		if i < len(revs) {
			buf = revs[i][:0]
		}
		f.revs = append(f.revs, append(buf, w.rev.slots...))
	}
	for si := range ix.shards {
		s := &ix.shards[si]
		f.nextNew[si] = s.nextNew
		old := f.pages[si]
		f.pages[si] = f.pages[si][:0]
		// Pages past the last place number ever used hold nothing.
		for i, pg := range s.pages[:s.usedPages()] {
			var buf []place
			if i < len(old) {
				buf = old[i][:0]
			}
			f.pages[si] = append(f.pages[si], append(buf, pg...))
		}
	}
	return f
}

// PrepareFreeze makes room for the next [Index.Freeze] without holding up
// events: it sizes the spare copy's buffers to the index as it is now and
// touches every memory page of the new ones, so that the copy itself, under
// the writer lock, faults nothing in. On this project's VMs fresh memory
// costs about 3 ms a MiB, which made a first Freeze of 10M holder-blocks
// stop events for over a second. A caller that must freeze under a lock of
// its own (as recovery's Store does, to pair the copy with its WAL index)
// calls PrepareFreeze before taking it.
func (ix *Index) PrepareFreeze() {
	f := ix.prepare()
	ix.mu.Lock()
	if ix.spare == nil {
		ix.spare = f
	}
	ix.mu.Unlock()
}

// prepare takes the spare copy (or a new one) and sizes it as PrepareFreeze
// describes; the caller owns the result.
func (ix *Index) prepare() *Frozen {
	ix.mu.Lock()
	f := ix.spare
	ix.spare = nil
	revLens := make([]int, len(ix.order))
	for i, id := range ix.order {
		revLens[i] = len(ix.workers[id].rev.slots)
	}
	var pages [shardCount]int
	for si := range ix.shards {
		pages[si] = ix.shards[si].usedPages()
	}
	ix.mu.Unlock()

	if f == nil {
		f = &Frozen{}
	}
	if len(f.revs) < len(revLens) {
		f.revs = append(f.revs, make([][]revSlot, len(revLens)-len(f.revs))...)
	}
	for i, n := range revLens {
		if cap(f.revs[i]) < n {
			// Room to grow a little before the copy.
			f.revs[i] = touched(populated(make([]revSlot, 0, n+n/8+8)), revSlotBytes)
		}
	}
	for si, n := range pages {
		for len(f.pages[si]) < n {
			f.pages[si] = append(f.pages[si], touched(populated(make([]place, 0, pageSize)), placeBytes))
		}
	}
	return f
}

// Sizes of the copied elements, to touch one per memory page.
const (
	revSlotBytes = 12
	placeBytes   = 32
	holdBytes    = 16
)

// touched writes a zero element every 4 KiB of buf's capacity, so that the
// memory is faulted in now rather than when it is first filled; it returns
// buf unchanged.
func touched[T any](buf []T, elemBytes int) []T {
	full := buf[:cap(buf)]
	var zero T
	for i := 0; i < len(full); i += max(1, 4096/elemBytes) {
		full[i] = zero
	}
	return buf
}

// Pause returns how long Freeze held event application to make this copy.
func (f *Frozen) Pause() time.Duration { return f.pause }

// Release gives the copy's memory back to ix for its next Freeze. f must not
// be used afterwards.
func (f *Frozen) Release(ix *Index) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.spare = f
}

// Stats returns the frozen index's size and counters.
func (f *Frozen) Stats() Stats { return f.stats }

// Workers returns the frozen worker keys, sorted, with their block counts.
func (f *Frozen) Workers() []WorkerBlocks {
	out := make([]WorkerBlocks, len(f.keys))
	for i, k := range f.keys {
		out[i] = WorkerBlocks{Worker: k, Blocks: f.blocks[i]}
	}
	return out
}

// errFrozenBlockCount is what Places panics with when a frozen reverse map
// holds another number of blocks than its worker's count says: a broken
// invariant of the engine, not a condition of the data.
const errFrozenBlockCount = "kvidx engine: a frozen reverse map's block count disagrees with its slots"

// placesParts is how many goroutines Places' pair passes use for an index of
// holderBlocks: one per processor, at most 8, for a large index, where the
// passes take long enough (0.3 s at 10M holder-blocks on one goroutine,
// while a snapshot writer's goroutine waits for the first chunk), one for a
// small one.
func placesParts(holderBlocks int) int {
	if holderBlocks < 1<<16 {
		return 1
	}
	return min(runtime.GOMAXPROCS(0), 8)
}

// pairParts splits the frozen workers into n runs of about equal block
// counts (some may be empty): part p is workers w[p]:w[p+1], and its
// pairs, in worker order, are k[p]:k[p+1] of all the pairs.
func (f *Frozen) pairParts(n int) (w, k []int) {
	total := 0
	for _, c := range f.blocks {
		total += c
	}
	w, k = []int{0}, []int{0}
	sum := 0
	for i, c := range f.blocks {
		sum += c
		for len(w) < n && sum*n >= total*len(w) {
			w, k = append(w, i+1), append(k, sum)
		}
	}
	for len(w) <= n {
		w, k = append(w, len(f.blocks)), append(k, total)
	}
	return w, k
}

// inParts calls fn(p) for every part p < n, each on a goroutine of its own
// when there are several, and returns when all have returned. A panic in a
// part is raised again on the caller's goroutine once every part has
// ended, so that a caller's recover sees it (the node turns a panic in an
// HTTP handler, a snapshot on demand among them, into an error answer) and
// no part still writes to the scratch memory after it.
func inParts(n int, fn func(p int)) {
	if n == 1 {
		fn(0)
		return
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked any
	)
	for p := range n {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					if panicked == nil {
						panicked = r
					}
					mu.Unlock()
				}
			}()
			fn(p)
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}

// Places calls yield for every place, in position order (places of one
// position in no particular order), until yield returns false. The record
// and its slices are reused between calls: copy what must outlive one.
// Calls on one Frozen must not overlap (they share working memory).
//
// Random memory access is what costs here: the place slabs are read in order
// (twice), places are counting-sorted by position, and the reverse maps'
// pairs are sorted into output order through cache-sized buckets, so the
// output pass reads everything in sequence.
func (f *Frozen) Places(yield func(*PlaceRecord) bool) {
	sc := &f.scratch
	// The arrays of the later passes, new memory on a copy's first call,
	// are faulted in on another goroutine while the first passes run.
	scratchReady := sc.reserve(f.stats.HolderBlocks)
	// Number every place slot densely: shard by shard, place by place.
	var base [shardCount + 1]int
	for si := range f.pages {
		base[si+1] = base[si] + len(f.pages[si])*pageSize
	}
	dense := func(ref uint32) int { return base[refShard(ref)] + int(refLocal(ref)) }
	// Passes over the slabs (read in order, cheap): one sizes, one counts
	// places by position, the last puts each at its position's next
	// ordinal. One pass into a list of live places, sorted afterwards, kept
	// a copy of every place as working memory (36 bytes a place, for as
	// long as the frozen copy is kept).
	eachLive := func(fn func(p *place, d int)) {
		for si := range f.pages {
			for pi, pg := range f.pages[si] {
				for li := range pg {
					local := pi*pageSize + li
					if p := &pg[li]; local != 0 && local < int(f.nextNew[si]) && p.h[0] != noHolder {
						fn(p, base[si]+local)
					}
				}
			}
		}
	}
	live, maxPos := 0, uint32(0)
	eachLive(func(p *place, _ int) {
		live++
		maxPos = max(maxPos, p.pos)
	})
	// Places are counted by position, or, when positions are sparse (an
	// event may start a chain at any position up to MaxPosition), by their
	// rank among the distinct positions: the counts must take memory in
	// proportion to places, not to the highest position.
	var distinct []uint32 // sorted distinct positions, when sparse
	if int(maxPos) >= 2*live+1<<16 {
		distinct = sc.distinct[:0]
		eachLive(func(p *place, _ int) { distinct = append(distinct, p.pos) })
		slices.Sort(distinct)
		distinct = slices.Compact(distinct)
		sc.distinct = distinct
	}
	rank := func(pos uint32) int {
		if distinct == nil {
			return int(pos)
		}
		i, _ := slices.BinarySearch(distinct, pos)
		return i
	}
	ranks := int(maxPos) + 1
	if distinct != nil {
		ranks = len(distinct)
	}
	perPos := resized(sc.perPos, ranks, true)
	sc.perPos = perPos
	eachLive(func(p *place, _ int) { perPos[rank(p.pos)]++ })
	next := int32(0)
	for r, n := range perPos {
		perPos[r] = next
		next += n
	}
	// ord[d] is the output ordinal of dense slot d, plus 1 (0: not live).
	ord := resized(sc.ord, base[shardCount], true)
	spans := resized(sc.spans, live, false)
	sc.ord, sc.spans = ord, spans
	eachLive(func(p *place, d int) {
		s := span{pos: p.pos, parent: -1, th: p.th, seq: p.seq}
		if p.parent != 0 && p.pos > 0 {
			s.parent = int32(dense(p.parent))
		}
		r := rank(p.pos)
		o := perPos[r]
		perPos[r]++
		spans[o] = s
		ord[d] = o + 1
	})
	// The reverse maps' (worker, block hash) pairs are sorted into output
	// order through buckets of 1<<bucketBits consecutive places: each pair
	// goes to its place's bucket, each bucket filled in order, so that only
	// one cache line a bucket is being written at a time (scattering pairs
	// straight to their places missed the cache on nearly every one, and a
	// 10M holder-block index has 160 MB of them); then each bucket, small
	// enough to stay in cache, is sorted to its places just before they are
	// yielded (so that a consumer on another goroutine starts early).
	// Workers are visited in key order and both passes are stable, so each
	// place's holders come sorted. Each pair's ordinal is looked up once (a
	// read that misses the cache) and kept for the scatter pass: lookups and
	// scatters are loops of their own, each with one miss an iteration, so
	// the processor keeps many misses in flight. The passes run on parts of
	// the workers at once, one goroutine a part (see pairParts).
	<-scratchReady
	const bucketBits = 12
	buckets := (len(spans) + 1<<bucketBits - 1) >> bucketBits
	parts := f.parts
	if parts == 0 {
		parts = placesParts(f.stats.HolderBlocks)
	}
	wb, kb := f.pairParts(parts)
	ords := resized(sc.ords, kb[parts], false)
	counts := resized(sc.counts, parts*buckets, true)
	sc.ords, sc.counts = ords, counts
	inParts(parts, func(p int) {
		// The part's pairs go to its own range of ords, sized by the block
		// counts; slots beyond them would be another part's.
		dst, i := ords[kb[p]:kb[p+1]], 0
		for _, slots := range f.revs[wb[p]:wb[p+1]] {
			for _, s := range slots {
				if s.ref != 0 {
					if i == len(dst) {
						panic(errFrozenBlockCount)
					}
					dst[i] = ord[dense(s.ref)] - 1
					i++
				}
			}
		}
		if i != len(dst) {
			panic(errFrozenBlockCount)
		}
		cs := counts[p*buckets : (p+1)*buckets]
		for _, o := range dst {
			cs[o>>bucketBits]++
		}
	})
	// bstart[b] is where bucket b's pairs start; counts become each part's
	// next free slot in each bucket.
	bstart := resized(sc.bstart, buckets+1, false)
	sc.bstart = bstart
	at := int32(0)
	for b := range buckets {
		bstart[b] = at
		for p := range parts {
			n := counts[p*buckets+b]
			counts[p*buckets+b] = at
			at += n
		}
	}
	bstart[buckets] = at
	holds := resized(sc.holds, int(at), false)
	sc.holds = holds
	inParts(parts, func(p int) {
		fill := counts[p*buckets : (p+1)*buckets]
		k := kb[p]
		for w := wb[p]; w < wb[p+1]; w++ {
			for _, s := range f.revs[w] {
				if s.ref != 0 {
					o := ords[k]
					k++
					b := o >> bucketBits
					holds[fill[b]] = hold{w: uint32(w), o: uint32(o), bh: unmix64(s.mixed())}
					fill[b]++
				}
			}
		}
	})
	var rec PlaceRecord
	rec.Holders = sc.holders[:0]
	bhs := sc.bhs[:0]
	bucket, start, fill := sc.bucket, sc.start, sc.fill
	defer func() {
		sc.holders, sc.bhs, sc.bucket, sc.start, sc.fill = rec.Holders[:0], bhs[:0], bucket, start, fill
	}()
	for b := range buckets {
		lo, hi := b<<bucketBits, min((b+1)<<bucketBits, len(spans))
		// A counting sort of the bucket's pairs by place: start[o-lo] is
		// where place o's pairs start in holds.
		bucket = append(bucket[:0], holds[bstart[b]:bstart[b+1]]...)
		start = resized(start, hi-lo+1, true)
		for _, h := range bucket {
			start[int(h.o)-lo+1]++
		}
		start[0] = bstart[b]
		for i := 1; i < len(start); i++ {
			start[i] += start[i-1]
		}
		fill = append(fill[:0], start[:hi-lo]...)
		for _, h := range bucket {
			i := int(h.o) - lo
			holds[fill[i]] = h
			fill[i]++
		}
		// Resolve parent links to ordinals in passes of their own: their
		// random reads overlap one another here, which they would not
		// between yields, and each pass has one miss an iteration (the
		// parent's ordinal, then the parent's position). A link goes stale
		// when its parent is freed and the slot reused; those that skip a
		// position are dropped here, and the loader checks that the rest
		// chain to their child.
		for o := lo; o < hi; o++ {
			s := &spans[o]
			p := int32(0)
			if s.parent >= 0 {
				p = ord[s.parent]
			}
			s.parent = p
		}
		for o := lo; o < hi; o++ {
			s := &spans[o]
			if p := s.parent; p != 0 && (p > int32(o) || spans[p-1].pos+1 != s.pos) {
				s.parent = 0
			}
		}
		for o := lo; o < hi; o++ {
			s := &spans[o]
			hs := holds[start[o-lo]:start[o-lo+1]]
			// Records are filled field by field: a struct literal was built
			// on the stack in 4- and 8-byte stores and copied out in 16-byte
			// loads, which cannot be forwarded from them, and those copies
			// took a third of Places.
			rec.ID, rec.Parent, rec.Position = uint32(o+1), uint32(s.parent), s.pos
			rec.TokensHash, rec.Seq, rec.Holders = s.th, s.seq, rec.Holders[:0]
			bhs = bhs[:0]
			for _, h := range hs {
				bhs = append(bhs, h.bh)
			}
			for k := 0; k < len(hs); {
				w, from := hs[k].w, k
				for k < len(hs) && hs[k].w == w {
					k++
				}
				rec.Holders = append(rec.Holders, HolderRecord{})
				h := &rec.Holders[len(rec.Holders)-1]
				h.Worker, h.BlockHashes, h.WorkerIndex = f.keys[w], bhs[from:k:k], w
			}
			if !yield(&rec) {
				return
			}
		}
	}
}
