package engine

import (
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"
)

// A growing index needs fresh memory: a bigger table for a shard or a
// reverse map that fills up, and slab pages for new places. On this
// project's VMs fresh memory costs about 2 ms a MiB to fault in, paid by
// whoever first touches it; filling a fresh index with the benchmark
// workload (kvidx bench, 473k holder-blocks) spent about half of its apply
// time so, on the writer's goroutine. The grower makes that memory on
// another goroutine ahead of need: when a table passes prepLoad of its
// size, the writer asks for a table of the size its next growth will take,
// and a slab page taken from the pool asks for the pool to be topped up.
// The writer never waits for the grower: memory that is not ready (or not
// the size the growth wants) is made by the writer as before.
//
// Prepared memory is held weakly: a garbage collection takes back what the
// writer has not claimed yet, so memory made for a growth that never comes
// (a table that stops filling just short of growing) is not kept, and the
// heap in use after a collection is the index's own.
//
// The grower's goroutine starts when there is work and ends when there is
// none, so an index needs no Close. A snapshot loader prepares its memory
// its own way (see startPrep), knowing ahead what it will build.
type grower struct {
	mu      sync.Mutex
	jobs    []func()
	running bool
	idle    chan struct{} // closed when the running goroutine ends

	pages       chan weakSlice[place]
	pagesWanted atomic.Bool // a top-up of pages is queued
	// minBytes is the smallest table worth preparing (prepMinBytes; tests
	// lower it to have small tables prepared too).
	minBytes int
}

// The load at which the writer asks for a table's next size. Shard tables
// grow at tableGrowLoad (0.75) from tableGrownLoad (0.45), reverse maps at
// growLoad (0.90) from grownLoad (0.50): asking at 0.68 and 0.82 leaves the
// grower a fifth of the inserts between two growths to make the table in
// (a shard takes one insert in shardCount, a reverse map one in the worker
// keys), and a fifth of the time for a collection to take it back first.
const (
	tablePrepLoad = 0.68
	revPrepLoad   = 0.82

	// prepMinBytes is the smallest memory worth preparing: below it the
	// fault costs less than queueing the job.
	prepMinBytes = 4 << 10

	// sparePages is how many slab pages the pool holds ready.
	sparePages = 64
)

func newGrower() grower {
	return grower{pages: make(chan weakSlice[place], sparePages), minBytes: prepMinBytes}
}

// post queues job and starts the goroutine if it is not running.
func (g *grower) post(job func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.jobs = append(g.jobs, job)
	if !g.running {
		g.running = true
		g.idle = make(chan struct{})
		go g.run()
	}
}

func (g *grower) run() {
	for {
		g.mu.Lock()
		if len(g.jobs) == 0 {
			g.running = false
			g.jobs = nil
			idle := g.idle
			g.mu.Unlock()
			// Nothing of the index is live on this goroutine from here
			// on: a collection right after wait returns may free it.
			close(idle)
			return
		}
		job := g.jobs[0]
		g.jobs[0] = nil
		g.jobs = g.jobs[1:]
		g.mu.Unlock()
		job()
	}
}

// wait returns when g has no job queued or running.
func (g *grower) wait() {
	g.mu.Lock()
	idle, running := g.idle, g.running
	g.mu.Unlock()
	if running {
		<-idle
	}
}

// WaitGrowth waits until the memory being made ahead for ix's growth is
// made. Call it between Applies before measuring the heap: a collection
// that runs while the grower works keeps what it makes meanwhile, and its
// queued jobs keep ix reachable, so heap figures after it are not the
// index's own.
func (ix *Index) WaitGrowth() { ix.grow.wait() }

// page returns a prepared slab page, or nil when none is ready; either way
// it has the pool topped up.
func (g *grower) page() []place {
	if g == nil {
		return nil
	}
	defer g.topUpPages()
	for {
		select {
		case w := <-g.pages:
			if pg := w.get(); pg != nil {
				return pg
			}
		default:
			return nil
		}
	}
}

func (g *grower) topUpPages() {
	if g.pages == nil || g.pagesWanted.Swap(true) {
		return
	}
	g.post(func() {
		g.pagesWanted.Store(false)
		for len(g.pages) < cap(g.pages) {
			pg := touched(populated(make([]place, pageSize)), placeBytes)
			select {
			case g.pages <- weakOf(pg):
			default:
				return
			}
		}
	})
}

// weakSlice holds a slice weakly: a collection may take its memory back
// while nothing else holds it (see grower).
type weakSlice[T any] struct {
	first weak.Pointer[T]
	n     int
}

func weakOf[T any](buf []T) weakSlice[T] { return weakSlice[T]{first: weak.Make(&buf[0]), n: len(buf)} }

// get returns the slice, or nil once a collection took it.
func (w weakSlice[T]) get() []T {
	if p := w.first.Value(); p != nil {
		return unsafe.Slice(p, w.n)
	}
	return nil
}

// spare is memory prepared for one coming resize, held weakly.
type spare[T any] struct {
	p atomic.Pointer[weakSlice[T]]
}

// take returns the prepared memory if it is n elements long and still
// there, else nil; either way the spare is empty afterwards.
func (s *spare[T]) take(n int) []T {
	if w := s.p.Swap(nil); w != nil && w.n == n {
		return w.get()
	}
	return nil
}

// prepare has g make n zeroed elements of elemBytes each, faulted in, as
// sp's memory. Small sizes are left to the writer.
func prepare[T any](g *grower, sp *spare[T], n, elemBytes int) {
	if g == nil || g.pages == nil || n*elemBytes < g.minBytes {
		return
	}
	g.post(func() {
		w := weakOf(touched(populated(make([]T, n)), elemBytes))
		sp.p.Store(&w)
	})
}

// grownSize is the size a table of size slots grows to, at load grow, to
// be at load grown afterwards: what capFor gives at the first insert past
// grow.
func grownSize(slots int, grow, grown float64) int {
	return capFor(int(grow*float64(slots))+1, grown)
}

// orFresh returns buf, or when it is nil n new elements mapped in by the
// caller's goroutine.
func orFresh[T any](buf []T, n int) []T {
	if buf != nil {
		return buf
	}
	return populated(make([]T, n))
}

// growth is how one kind of table grows: at load grow to load grown, the
// next size asked of the grower at load prep.
type growth struct {
	grow, grown, prep float64
	elemBytes         int
}

func shardGrowth() growth {
	return growth{grow: tableGrowLoad, grown: tableGrownLoad, prep: tablePrepLoad, elemBytes: 8}
}

func revGrowth() growth {
	return growth{grow: growLoad, grown: grownLoad, prep: revPrepLoad, elemBytes: revSlotBytes}
}

// roomFor returns the memory a table of size slots holding n must move to
// before one more insert (the memory sp holds, when the grower prepared it,
// else new memory), or nil when it has room; nearing its growth, it asks g
// to prepare that memory in sp (once a size: asked remembers).
func roomFor[T any](g *grower, gr growth, n, size int, asked *int, sp *spare[T]) []T {
	switch {
	case float64(n+1) > gr.grow*float64(size):
		next := capFor(n+1, gr.grown)
		return orFresh(sp.take(next), next)
	case *asked != size && float64(n+1) > gr.prep*float64(size):
		*asked = size
		prepare(g, sp, grownSize(size, gr.grow, gr.grown), gr.elemBytes)
	}
	return nil
}
