package engine

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

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
	ix *Index
	// refs are the new index's refs of the places at the last two
	// positions loaded, by record ID from refsBase. A parent link chains
	// only to the position before its place, so older refs are never
	// looked up: keeping them all cost 4 bytes a place of new memory (36
	// MB at 10M holder-blocks) and a cache miss a place.
	refs      []uint32
	refsBase  uint32 // the record ID of refs[0]
	lastStart uint32 // the first record ID at lastPos
	nextID    uint32
	lastPos   uint32
	pending   [][]revSlot // by dense worker id: reverse-map slots to insert (12 bytes: less memory to fault in)
	// perWorker is the first capacity of a pending list: room for the
	// reverse map of a worker a little over the mean, which Finish builds
	// in the list's own memory (see buildRev) when the mean is more than a
	// couple of hundred blocks (below, the map's memory is trivial).
	perWorker int
	// recent caches worker lookups: holders of nearby places are mostly
	// the same few worker keys, and a map lookup per holder shows.
	recent [4096]recentWorker
	// prep, when the hint allows, is memory faulted in ahead by another
	// goroutine (see startPrep).
	prep *loaderPrep
	one  PlaceBatch // Add's batch of one
}

// loaderPrep hands the loader slab pages and pending lists that a
// background goroutine has already faulted in. On this project's VMs fresh
// memory costs about 3 ms a MiB to fault in; loading 10M holder-blocks
// writes some 300 MB of it while decoding keeps the other core only partly
// busy, so the faulting moves there. What the loader does not take is
// garbage after Finish.
type loaderPrep struct {
	pages   [shardCount]chan []place
	pending chan []revSlot
	stop    chan struct{}
	done    chan struct{}
}

type recentWorker struct {
	key WorkerKey
	id  uint32
	ok  bool
}

// LoaderHint sizes a loader's memory up front (all fields optional): the
// counts a snapshot's meta holds.
type LoaderHint struct {
	Places, HolderBlocks, WorkerKeys int
}

// NewLoader returns a loader of an empty index. A hint, when given, saves
// the copying of growing buffers.
func NewLoader(hint ...LoaderHint) *Loader {
	l := &Loader{ix: New(), refsBase: 1, lastStart: 1, nextID: 1}
	if len(hint) > 0 {
		h := hint[0]
		if h.WorkerKeys > 0 && h.HolderBlocks > 0 {
			// The reverse map of a worker a little over the mean: workers
			// (caches of one size, mostly full) then have their maps built
			// where their lists were, and no list grows.
			if mean := h.HolderBlocks / h.WorkerKeys; mean <= prepMaxSlots {
				l.perWorker = loadedCap(mean + mean/16 + 16)
			}
		}
		if h.Places >= prepMinPlaces && h.Places <= prepMaxPlaces && h.WorkerKeys > 0 && h.WorkerKeys <= MaxWorkerKeys &&
			l.perWorker > 0 && l.perWorker <= prepMaxSlots/h.WorkerKeys {
			l.prep = startPrep(h.Places/shardCount/pageSize+2, h.WorkerKeys, l.perWorker)
		}
	}
	return l
}

// Bounds on what a loader faults in ahead: below prepMinPlaces it is not
// worth a goroutine; the upper bounds keep a wrong hint from allocating
// without limit (the loader still works without prepared memory).
const (
	prepMinPlaces = 1 << 16
	prepMaxPlaces = 1 << 27
	prepMaxSlots  = 1 << 28
)

// startPrep starts faulting in pagesPerShard slab pages for every shard and
// a pending list of perWorker slots for each of workers, interleaved in
// the order the loader tends to need them.
func startPrep(pagesPerShard, workers, perWorker int) *loaderPrep {
	p := &loaderPrep{pending: make(chan []revSlot, workers), stop: make(chan struct{}), done: make(chan struct{})}
	for si := range p.pages {
		p.pages[si] = make(chan []place, pagesPerShard)
	}
	go func() {
		defer close(p.done)
		perRound := workers/pagesPerShard + 1
		for round, sent := 0, 0; round < pagesPerShard || sent < workers; round++ {
			for n := 0; n < perRound && sent < workers; n, sent = n+1, sent+1 {
				select {
				case p.pending <- touched(hugeAdvised(make([]revSlot, 0, perWorker)), revSlotBytes):
				case <-p.stop:
					return
				}
			}
			if round >= pagesPerShard {
				continue
			}
			for si := range p.pages {
				select {
				case p.pages[si] <- touched(hugeAdvised(make([]place, pageSize)), placeBytes):
				case <-p.stop:
					return
				}
			}
		}
	}()
	return p
}

// pendingList is the channel of prepared pending lists; nil (never ready)
// without preparation.
func (p *loaderPrep) pendingList() <-chan []revSlot {
	if p == nil {
		return nil
	}
	return p.pending
}

// end stops the preparing goroutine and waits for it.
func (p *loaderPrep) end() {
	if p != nil {
		close(p.stop)
		<-p.done
	}
}

// PlaceBatch is places in the compact form Loader.AddPlaces takes: no
// pointers, 32 bytes a place and 8 a holder. A snapshot decoder fills
// batches on one goroutine while the loader empties others on another, and
// every cache line of a batch crosses between the two processors: a
// PlaceRecord with its HolderRecords moved twice as many.
type PlaceBatch struct {
	Workers []WorkerKey // the table BatchHolder.Worker indexes
	Places  []BatchPlace
	Holders []BatchHolder
	Hashes  []uint64
}

// BatchPlace is a PlaceRecord of a PlaceBatch. Its holders are
// Holders[HoldersEnd of the place before it (0 for the first):HoldersEnd].
type BatchPlace struct {
	ID, Parent, Position uint32
	HoldersEnd           uint32
	TokensHash, Seq      uint64
}

// BatchHolder is a HolderRecord of a PlaceBatch: Workers[Worker] holds the
// place under Hashes[HashesEnd of the holder before it (0 for the first):
// HashesEnd].
type BatchHolder struct {
	Worker    uint32
	HashesEnd uint32
}

// Reset empties the batch, keeping its memory (and its worker table).
func (b *PlaceBatch) Reset() {
	b.Places, b.Holders, b.Hashes = b.Places[:0], b.Holders[:0], b.Hashes[:0]
}

// Add adds one place record, as AddPlaces does.
func (l *Loader) Add(rec *PlaceRecord) error {
	b := &l.one
	b.Reset()
	b.Workers = b.Workers[:0]
	for _, h := range rec.Holders {
		b.Workers = append(b.Workers, h.Worker)
		b.Hashes = append(b.Hashes, h.BlockHashes...)
		b.Holders = append(b.Holders, BatchHolder{Worker: uint32(len(b.Workers) - 1), HashesEnd: uint32(len(b.Hashes))})
	}
	b.Places = append(b.Places, BatchPlace{ID: rec.ID, Parent: rec.Parent, Position: rec.Position,
		HoldersEnd: uint32(len(b.Holders)), TokensHash: rec.TokensHash, Seq: rec.Seq})
	return l.AddPlaces(b)
}

// AddPlaces adds a batch of places. Places must come in position order with
// IDs 1, 2, 3...; a parent link that does not chain is dropped (its holders
// are then scored as possibly having holes). A malformed place is an error
// that names it, and leaves the loader unusable. The parents the batch links
// to are loaded first, together: at millions of places those loads miss the
// cache, and issued together their misses overlap.
func (l *Loader) AddPlaces(b *PlaceBatch) error {
	ix, sink := l.ix, l.ix.sink
	for i := range b.Places {
		if ref, ok := l.parentRef(b.Places[i].Parent); ok {
			sink += ix.placeOf(ref).seq
		}
	}
	// Each holder appends to its worker's pending list: load the slot the
	// append will write, so that the batch's misses on 1,000 lists overlap
	// (a store that misses waits in line; these loads do not).
	for _, h := range b.Holders {
		if int(h.Worker) >= len(b.Workers) {
			continue
		}
		key := b.Workers[h.Worker]
		if c := l.recentFor(key); c.ok && c.key == key && int(c.id) < len(l.pending) {
			if buf := l.pending[c.id]; len(buf) < cap(buf) {
				sink += uint64(buf[:len(buf)+1][len(buf)].ref)
			}
		}
	}
	ix.sink = sink
	h0, x0 := uint32(0), uint32(0)
	for i := range b.Places {
		rec := &b.Places[i]
		if rec.HoldersEnd < h0 || int(rec.HoldersEnd) > len(b.Holders) {
			return fmt.Errorf("place %d: holders %d..%d outside the batch's %d", rec.ID, h0, rec.HoldersEnd, len(b.Holders))
		}
		hs := b.Holders[h0:rec.HoldersEnd]
		h0 = rec.HoldersEnd
		if err := l.add(rec, hs, b, &x0); err != nil {
			return err
		}
	}
	if int(h0) != len(b.Holders) || int(x0) != len(b.Hashes) {
		return fmt.Errorf("batch of %d places: %d holders and %d block hashes belong to none", len(b.Places), len(b.Holders)-int(h0), len(b.Hashes)-int(x0))
	}
	return nil
}

// add adds one place of b, whose holders are hs; x0 is where the first
// holder's block hashes start, and is moved past the last's.
func (l *Loader) add(rec *BatchPlace, hs []BatchHolder, b *PlaceBatch, x0 *uint32) error {
	ix := l.ix
	switch {
	case rec.ID != l.nextID:
		return fmt.Errorf("place record %d: id %d, want ids 1, 2, 3... in order", l.nextID, rec.ID)
	case len(hs) == 0:
		return fmt.Errorf("place %d: no holder", rec.ID)
	case rec.Position > MaxPosition:
		return fmt.Errorf("place %d: position %d out of range", rec.ID, rec.Position)
	case rec.Position < l.lastPos:
		return fmt.Errorf("place %d: position %d after position %d: records out of order", rec.ID, rec.Position, l.lastPos)
	}
	if rec.Parent >= rec.ID {
		return fmt.Errorf("place %d: parent %d does not come before it", rec.ID, rec.Parent)
	}
	if rec.Position != l.lastPos {
		l.slideRefs(rec.Position, rec.ID)
	}
	var parent uint32
	if ref, ok := l.parentRef(rec.Parent); ok {
		if pp := ix.placeOf(ref); pp.pos+1 == rec.Position && NextSeq(pp.seq, rec.TokensHash) == rec.Seq {
			parent = ref
		}
	}
	h := keyHash(rec.Position, rec.TokensHash)
	si := uint32(h >> (64 - shardBits))
	s := &ix.shards[si]
	if l.prep != nil && s.free == 0 && int(max(s.nextNew, 1)>>pageBits) == len(s.pages) {
		// The next place opens a page: take one faulted in ahead, if ready.
		select {
		case pg := <-l.prep.pages[si]:
			s.pages = append(s.pages, pg)
		default:
		}
	}
	local := s.allocPlace(nil)
	s.places++
	p := s.place(local)
	p.set(rec.Position, rec.TokensHash, rec.Seq, parent)
	ref := makeRef(si, local)
	for _, hr := range hs {
		if hr.HashesEnd < *x0 || int(hr.HashesEnd) > len(b.Hashes) || int(hr.Worker) >= len(b.Workers) {
			return fmt.Errorf("place %d: holder outside the batch", rec.ID)
		}
		bhs := b.Hashes[*x0:hr.HashesEnd]
		*x0 = hr.HashesEnd
		key := b.Workers[hr.Worker]
		if len(bhs) == 0 {
			return fmt.Errorf("place %d: worker %v holds it under no block hash", rec.ID, key)
		}
		id, w, err := l.worker(key)
		if err != nil {
			return fmt.Errorf("place %d: %w", rec.ID, err)
		}
		if !s.pushHolder(p, id) {
			return fmt.Errorf("place %d: worker %v listed twice", rec.ID, key)
		}
		if l.pending[id] == nil && l.perWorker > 0 {
			select {
			case buf := <-l.prep.pendingList():
				l.pending[id] = buf
			default:
				l.pending[id] = hugeAdvised(make([]revSlot, 0, l.perWorker))
			}
		}
		for i, bh := range bhs {
			mk := mix64(bh)
			l.pending[id] = append(l.pending[id], revSlot{lo: uint32(mk), hi: uint32(mk >> 32), ref: ref})
			if i > 0 {
				if w.dup == nil {
					w.dup = map[uint32]uint32{}
				}
				w.dup[ref]++
			}
		}
		ix.holderBlocks += len(bhs)
		if w.untracked {
			continue
		}
		switch {
		case rec.Position == 0:
			if rec.Seq != rec.TokensHash {
				ix.untrack(id, w)
			}
		case parent == 0 || !ix.shards[refShard(parent)].addKidUnshared(refLocal(parent), id):
			ix.untrack(id, w)
		}
	}
	l.refs = append(l.refs, ref)
	l.nextID++
	l.lastPos = rec.Position
	return nil
}

// slideRefs moves the refs window on to a first place at pos, record id:
// the places at lastPos stay (as the position before) only when pos
// follows it.
func (l *Loader) slideRefs(pos, id uint32) {
	if pos == l.lastPos+1 {
		n := copy(l.refs, l.refs[l.lastStart-l.refsBase:])
		l.refs, l.refsBase = l.refs[:n], l.lastStart
	} else {
		l.refs, l.refsBase = l.refs[:0], id
	}
	l.lastStart = id
}

// parentRef is the ref of the place with record ID id, when it is in the
// window (a link to any other place cannot chain).
func (l *Loader) parentRef(id uint32) (uint32, bool) {
	if id < l.refsBase || id-l.refsBase >= uint32(len(l.refs)) {
		return 0, false
	}
	return l.refs[id-l.refsBase], true
}

// recentFor is key's slot in the recent-workers cache.
func (l *Loader) recentFor(key WorkerKey) *recentWorker {
	return &l.recent[(key.WorkerID^uint64(key.DPRank)<<32)*0x9e3779b97f4a7c15>>52]
}

// worker returns the dense id of key, registering it when new.
func (l *Loader) worker(key WorkerKey) (uint32, *worker, error) {
	ix := l.ix
	c := l.recentFor(key)
	if c.ok && c.key == key {
		return c.id, ix.workers[c.id], nil
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
	*c = recentWorker{key: key, id: id, ok: true}
	return id, w, nil
}

// Close stops what a loader does in the background (faulting memory in
// ahead) when it will not be finished, e.g. after an error. Finish calls it;
// calling it again does nothing.
func (l *Loader) Close() {
	l.prep.end()
	l.prep = nil
}

// Finish builds the hash tables, sets the counters (part of the state a
// snapshot keeps) and returns the index. It fails when two records name the
// same place or a worker holds one block hash twice. The tables are
// independent of each other, so they are built on every processor. The
// loader must not be used afterwards.
func (l *Loader) Finish(c Counters) (*Index, error) {
	l.Close()
	ix := l.ix
	l.ix = nil
	tasks := shardCount + len(l.pending)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(runtime.GOMAXPROCS(0), tasks) {
		wg.Go(func() {
			var scratch []revSlot
			for t := int(next.Add(1) - 1); t < tasks; t = int(next.Add(1) - 1) {
				var err error
				if t < shardCount {
					err = ix.shards[t].buildTable()
				} else {
					scratch, err = ix.workers[t-shardCount].buildRev(l.pending[t-shardCount], scratch)
					l.pending[t-shardCount] = nil
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	ix.counters = c
	return ix, nil
}

// loadedCap is the capacity of a table the loader builds for n items: the
// load a table has after shrinking (0.6), not after growing (0.5 or 0.45). A
// loaded table still has room to grow before its first resize (by half for a
// reverse map, by a quarter for a shard table), and a
// restart faults in less new memory: 65 MB less for 10M holder-blocks, and
// the 10M restart's median went from 2.57 s to 1.96 s in 16 alternating
// pairs of runs.
func loadedCap(n int) int { return capFor(n, shrunkLoad) }

// buildTable builds the shard's table from its slab of places.
func (s *shard) buildTable() error {
	if s.places == 0 {
		return nil
	}
	s.table = hugeAdvised(make([]uint64, loadedCap(s.places)))
	for local := uint32(1); local < s.nextNew; local++ {
		p := s.place(local)
		fp := fingerprint(keyHash(p.pos, p.th))
		at, sibling, stop := s.find(p.pos, p.th, p.seq, fp)
		if at >= 0 {
			return fmt.Errorf("place (position %d, local hash %d, seq %d) appears twice", p.pos, p.th, p.seq)
		}
		s.insertAt(stop, uint64(fp)<<32|uint64(local))
		if !sibling {
			s.entries++
		}
	}
	return nil
}

// buildRev builds the worker's reverse map from its blocks, in the blocks'
// own memory when the map fills most of it (they are copied to scratch
// first, which it returns for the next call): at 10M holder-blocks the
// lists and the maps were 154 and 205 MB of fresh memory, the main cost of
// a restart. A list much larger than the map (a worker well under the
// mean) is left to the collector, so that the map wastes at most an eighth
// of its memory.
func (w *worker) buildRev(blocks, scratch []revSlot) ([]revSlot, error) {
	n := loadedCap(len(blocks))
	if c := cap(blocks); c >= n && n >= c-c/8 {
		scratch = append(scratch[:0], blocks...)
		w.rev.slots = blocks[:n]
		clear(w.rev.slots)
		blocks = scratch
	} else {
		w.rev.slots = hugeAdvised(make([]revSlot, n))
	}
	for _, b := range blocks {
		at, stop := w.rev.findMixed(b.mixed())
		if at >= 0 {
			return scratch, fmt.Errorf("worker %v holds block %d twice", w.key, unmix64(b.mixed()))
		}
		w.rev.insertAt(stop, b)
		w.rev.n++
	}
	return scratch, nil
}
