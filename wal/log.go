package wal

// Group commit. [Log.Append] is called concurrently by many producers. One
// committer goroutine takes everything pending (bounded by
// [Options.MaxPending]; beyond it Append fails with [ErrOverloaded]) and
// writes it as ONE entry, never splitting a producer's batch, syncs per
// policy (under SyncAlways a syncer goroutine fsyncs while the committer
// writes the next entries, one fsync covering every entry written before it
// started), calls [Options.OnCommit] with the entry's events (in index
// order: the commit order is the apply order), then answers each producer
// with the entry's index. A write or fsync failure fails every batch of the
// entry and fences the log: every later Append fails with [ErrFenced] until
// the log is reopened.
//
// Sync policies and loss windows:
//
//   - [SyncAlways] (default): producers are answered after fsync. Nothing
//     acknowledged is lost, even on power loss.
//   - [SyncInterval]: producers are answered after write(2); fsync runs at
//     most every [Options.SyncInterval] (5ms). A process crash loses nothing
//     acknowledged; an OS crash or power loss loses up to the last interval
//     plus one fsync of acknowledged entries.
//   - [SyncNone]: no fsync of entries; an OS crash or power loss may lose
//     any acknowledged entry not yet written back by the kernel.
//
// The directory is fsynced after open, tail repair, TruncateFront and each
// segment rollover (tidwall/wal never does it).
//
// Reads are serialised (tidwall/wal v1.2.1 can panic on concurrent reads of
// non-tail segments).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvidx/kvidx/engine"
	twal "github.com/tidwall/wal"
)

// Errors. Every error the package returns names the log directory and wraps
// one of these (or an I/O error) so callers can test it with errors.Is.
var (
	// ErrOverloaded: the pending queue is full; the batch was not taken. Retry later.
	ErrOverloaded = errors.New("wal overloaded")
	// ErrFenced: an earlier write or fsync failed; the log acknowledges nothing
	// more until it is closed and reopened. The error wraps the cause as well.
	ErrFenced = errors.New("wal fenced")
	// ErrClosed: the log is closed.
	ErrClosed = errors.New("wal closed")
	// ErrCorrupt: an entry fails its checks somewhere other than a torn tail.
	ErrCorrupt = errors.New("wal corrupt")
	// ErrLocked: another writer holds the directory's lock.
	ErrLocked = errors.New("wal locked")
	// ErrTruncated: a read starts before the first index still in the log.
	ErrTruncated = errors.New("wal truncated")
)

// Position is a generic source position carried by an entry: the source's
// name and, typically, the last sequence number of it the entry includes.
type Position struct {
	Source string
	Seq    uint64
}

// Entry is one decoded WAL entry: the events of every batch committed in it,
// in commit (= apply) order, and the merged positions of those batches (for
// a source named by several, the last batch's value).
type Entry struct {
	Index     uint64
	Events    []engine.Event
	Positions []Position
}

// SyncPolicy says when an appended entry is fsynced.
type SyncPolicy int

const (
	// SyncAlways fsyncs every entry before answering its producers. Nothing
	// acknowledged is lost by a crash, power loss included. The default.
	SyncAlways SyncPolicy = iota
	// SyncInterval answers producers once the entry is written (in the page
	// cache) and fsyncs at most every Options.SyncInterval. A process crash
	// loses nothing acknowledged; an OS crash or power loss loses up to the
	// last SyncInterval plus one fsync's worth of acknowledged entries.
	SyncInterval
	// SyncNone never fsyncs entries (only segment rollover, which tidwall/wal
	// syncs itself). An OS crash or power loss can lose any amount.
	SyncNone
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// ParseSyncPolicy parses "always", "interval" or "none".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	for _, p := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("wal: unknown sync policy %q (want always, interval or none)", s)
}

// Store is the layer Log writes through: tidwall/wal's Write, and an fsync of
// the tail segment (called with no concurrent Sync).
// [Options.WrapStore] lets tests inject failures and hooks around it.
type Store interface {
	Write(index uint64, data []byte) error
	Sync() error
}

// twStore is the default Store: writes go to tidwall/wal; Sync fsyncs the
// tail segment through Log's own descriptor, because tidwall/wal's Sync
// holds its lock for the whole fsync and would stall the next Write.
type twStore struct {
	tw *twal.Log
	l  *Log
}

func (s twStore) Write(index uint64, data []byte) error { return s.tw.Write(index, data) }

// Sync is called with l.fdMu held.
func (s twStore) Sync() error { return s.l.tailFile.Sync() }

// Options configure [Open]. The zero value is valid.
type Options struct {
	// Sync is the sync policy; default SyncAlways.
	Sync SyncPolicy
	// SyncInterval is the longest time between fsyncs under SyncInterval;
	// default 5ms.
	SyncInterval time.Duration
	// MaxPending bounds the Append calls queued for the committer; beyond
	// it Append fails fast with ErrOverloaded. Default 4096.
	MaxPending int
	// MaxEntryBytes is a soft bound on the uncompressed size of one entry:
	// the committer stops coalescing batches once it is reached (a single
	// batch is never split). Default 4 MiB.
	MaxEntryBytes int
	// SegmentSize is tidwall/wal's target segment size; default 512 KiB.
	// tidwall/wal keeps the tail segment in one growing buffer, and on this
	// project's VMs the first touch of a freshly doubled buffer costs about
	// 3 ms a MiB, under its lock: 20 MiB segments (its default) stalled every
	// producer for ~45 ms at the last doubling, 4 MiB ones for ~10 ms. Small
	// segments spread that cost into short stalls; below 512 KiB the fsync
	// tidwall/wal does when it closes a segment starts to dominate
	// (BenchmarkAppend's p99 at 500k block ops/s offered, KVIDX_BENCH_SEGMENT).
	SegmentSize int
	// OnCommit, if set, is called by the committer goroutine once per entry,
	// in index order, after the entry is written (and synced under
	// SyncAlways) and before its producers are answered: applying the
	// events here makes the commit order the apply order. The entry holds
	// every event and the merged positions, as [Log.Entries] would read
	// them. OnCommit may return one result per event (or nil): each producer
	// gets its events' results from [Log.AppendResults]. The entry's slices
	// belong to the producers: do not keep them after returning. OnCommit
	// must not call Append or Close.
	OnCommit func(e Entry) []error
	// Logger receives repair and failure reports; default slog.Default().
	Logger *slog.Logger
	// DirLock, if set, is the directory's lock, already held (see
	// [LockDir]); Open uses it instead of locking, and Close leaves it held.
	DirLock *DirLock
	// WrapStore, if set, wraps the store Log writes through (tests).
	WrapStore func(Store) Store
	// dirSync fsyncs the log's directory; default syncDir. Tests wrap it
	// to see when the directory is fsynced, which nothing outside shows.
	dirSync func(dir string) error
}

// Stats are counters of one open Log.
type Stats struct {
	// TornBytesDropped is how many bytes Open cut off a torn tail.
	TornBytesDropped int64
	// Entries, Appends, Events and Bytes count entries written, batches
	// acknowledged, events in them and entry payload bytes written since Open.
	Entries, Appends, Events, Bytes uint64
	// Syncs counts fsyncs of entries.
	Syncs uint64
	// Fenced tells whether a write or fsync failed.
	Fenced bool
}

// Log is kvidx's durable event log over tidwall/wal. Append is safe for
// concurrent use; so are the other methods.
type Log struct {
	dir     string
	opts    Options
	logger  *slog.Logger
	tw      *twal.Log
	store   Store
	lock    *DirLock
	ownLock bool
	torn    int64

	readMu sync.Mutex // serialises tidwall reads (concurrent Read of non-tail segments can panic)
	wmu    sync.Mutex // held by the committer around writes, and by TruncateFront

	// fdMu guards tailFile, fill and lastWritten, so a sync knows what it covers:
	// every entry up to lastWritten is in tailFile or in an earlier segment
	// tidwall/wal synced when it rolled over.
	fdMu        sync.Mutex
	tailFile    *os.File
	fill        []byte // extendTail's fill bytes
	lastWritten uint64
	toSync      chan *commitItem // SyncAlways: written entries for the syncer
	syncerDone  chan struct{}

	queue   chan *request
	quit    chan struct{}
	stopped chan struct{}

	closeMu   sync.Mutex
	closed    bool
	closeDone chan struct{} // closed once the first Close has finished and set closeErr
	closeErr  error

	fence atomic.Pointer[error]

	entries, appends, events, bytes, syncs atomic.Uint64

	// Committer-only state.
	next     uint64 // index of the next entry
	tailSize int    // mirror of tidwall's tail segment size, to see rollovers
	raw, buf []byte
	dirty    bool
	lastSync time.Time
}

// request states.
const (
	reqPending int32 = iota
	reqTaken
	reqCancelled
)

type request struct {
	events    []engine.Event
	positions []Position
	// size estimates the encoded batch, computed by the producer: once its
	// Append has returned (cancelled), the events are the caller's again
	// and the committer must not read them.
	size  int
	state atomic.Int32
	done  chan result
}

// commitItem is one written entry awaiting its sync (SyncAlways).
type commitItem struct {
	index     uint64
	reqs      []*request
	nev       int
	positions []Position
}

type result struct {
	index   uint64
	results []error // per event, from OnCommit; nil when it gave none
	err     error
}

// Open opens (creating if needed) the log in dir: it takes the directory
// lock, cuts a torn tail off the last segment (see the top of repair.go),
// opens tidwall/wal and starts the committer.
func Open(dir string, opts *Options) (*Log, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = 5 * time.Millisecond
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 4096
	}
	if o.MaxEntryBytes <= 0 {
		o.MaxEntryBytes = 4 << 20
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = 512 << 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.dirSync == nil {
		o.dirSync = syncDir
	}
	if o.Sync < SyncAlways || o.Sync > SyncNone {
		return nil, fmt.Errorf("wal %s: invalid sync policy %d", dir, int(o.Sync))
	}
	l := &Log{dir: dir, opts: o, logger: o.Logger, lock: o.DirLock}
	if l.lock == nil {
		lock, err := LockDir(dir)
		if err != nil {
			return nil, err
		}
		l.lock, l.ownLock = lock, true
	}
	if err := l.open(); err != nil {
		if l.ownLock {
			l.lock.Unlock()
		}
		return nil, err
	}
	l.queue = make(chan *request, o.MaxPending)
	l.quit = make(chan struct{})
	l.stopped = make(chan struct{})
	l.closeDone = make(chan struct{})
	l.syncerDone = make(chan struct{})
	if o.Sync == SyncAlways {
		l.toSync = make(chan *commitItem, 16)
		go l.syncLoop()
	} else {
		close(l.syncerDone)
	}
	go l.commitLoop()
	return l, nil
}

func (l *Log) open() error {
	// Refused before anything changes: a torn tail cut in what is left
	// would turn the missing segments, put back, into a gap.
	if err := CheckTail(l.dir); err != nil {
		return err
	}
	if err := removeTruncationTemps(l.dir, l.logger); err != nil {
		return err
	}
	torn, err := repairTail(l.dir, l.logger, l.opts.dirSync)
	if err != nil {
		return err
	}
	l.torn = torn
	tw, err := twal.Open(l.dir, &twal.Options{
		NoSync:           true, // Log syncs per its policy
		SegmentSize:      l.opts.SegmentSize,
		SegmentCacheSize: 2,
		AllowEmpty:       true,
		DirPerms:         0o750,
		FilePerms:        0o640,
	})
	if err != nil {
		return fmt.Errorf("wal %s: open: %w", l.dir, err)
	}
	l.tw = tw
	last, err := tw.LastIndex()
	if err != nil {
		tw.Close()
		return fmt.Errorf("wal %s: %w", l.dir, err)
	}
	if err := l.recordTail(); err != nil {
		tw.Close()
		return err
	}
	if err := l.opts.dirSync(l.dir); err != nil {
		tw.Close()
		return err
	}
	l.next = last + 1
	l.lastWritten = last
	l.store = twStore{tw: tw, l: l}
	if l.opts.WrapStore != nil {
		l.store = l.opts.WrapStore(l.store)
	}
	if err := l.reopenTail(); err != nil {
		tw.Close()
		return err
	}
	return nil
}

// reopenTail (re)opens Log's descriptor on the last segment file, resets
// the rollover mirror and preallocates the segment (see prealloc.go).
// Called with fdMu held or before the goroutines start.
func (l *Log) reopenTail() error {
	segs, err := listSegments(l.dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", l.dir, err)
	}
	if len(segs) == 0 {
		return fmt.Errorf("wal %s: no segment after open", l.dir)
	}
	name := segs[len(segs)-1].name
	f, err := os.OpenFile(filepath.Join(l.dir, name), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("wal %s: segment %s: %w", l.dir, name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("wal %s: segment %s: %w", l.dir, name, err)
	}
	if l.tailFile != nil {
		if old, err := l.tailFile.Stat(); err == nil && os.SameFile(old, fi) {
			// TruncateFront left the tail segment as it was: its size
			// includes the fill, and the rollover mirror is still right.
			f.Close()
			return nil
		}
		l.tailFile.Close()
	}
	l.tailFile, l.tailSize = f, int(fi.Size())
	l.extendTail(f, fi.Size())
	return nil
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Append submits one batch (events and the positions it reaches) and waits
// until it is committed: written in one entry, never split, possibly with
// other producers' batches, and synced under SyncAlways. It returns the
// entry's index. The caller must not modify events until Append returns.
//
// If the queue is full Append fails at once with ErrOverloaded. If ctx ends
// before the committer has taken the batch, Append returns ctx's error and
// the batch is never written; once taken, Append waits for the outcome
// (one write and fsync). After a write or fsync failure every Append fails
// with an error wrapping ErrFenced and the cause; the failed batch itself
// may or may not be on disk after a crash.
func (l *Log) Append(ctx context.Context, events []engine.Event, positions []Position) (uint64, error) {
	index, _, err := l.AppendResults(ctx, events, positions)
	return index, err
}

// AppendResults is [Log.Append] that also returns what [Options.OnCommit]
// returned for this batch's events (nil if it returned nothing), e.g. the
// events the index rejected.
func (l *Log) AppendResults(ctx context.Context, events []engine.Event, positions []Position) (uint64, []error, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if err := l.fenced(); err != nil {
		return 0, nil, err
	}
	r := &request{events: events, positions: positions, size: estimate(events), done: make(chan result, 1)}
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		return 0, nil, fmt.Errorf("wal %s: %w", l.dir, ErrClosed)
	}
	select {
	case l.queue <- r:
	default:
		l.closeMu.Unlock()
		return 0, nil, fmt.Errorf("wal %s: %d batches pending: %w", l.dir, l.opts.MaxPending, ErrOverloaded)
	}
	l.closeMu.Unlock()
	select {
	case res := <-r.done:
		return res.index, res.results, res.err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqPending, reqCancelled) {
			return 0, nil, ctx.Err()
		}
		res := <-r.done
		return res.index, res.results, res.err
	}
}

func (l *Log) fenced() error {
	if p := l.fence.Load(); p != nil {
		return *p
	}
	return nil
}

// setFence marks the log failed with cause and returns the error producers get.
func (l *Log) setFence(cause error) error {
	err := fmt.Errorf("wal %s: %w: %w", l.dir, ErrFenced, cause)
	if l.fence.CompareAndSwap(nil, &err) {
		l.logger.Error("wal: write failed, log fenced until reopen", "dir", l.dir, "err", cause)
	}
	return *l.fence.Load()
}

// commitLoop is the committer goroutine.
func (l *Log) commitLoop() {
	defer func() {
		if l.toSync != nil {
			close(l.toSync)
		}
		<-l.syncerDone
		close(l.stopped)
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []*request
	for {
		var timerC <-chan time.Time
		if l.dirty && l.opts.Sync == SyncInterval {
			timer.Reset(max(0, l.opts.SyncInterval-time.Since(l.lastSync)))
			timerC = timer.C
		}
		select {
		case r := <-l.queue:
			batch = l.gather(append(batch[:0], r))
			l.commit(batch)
			clear(batch)
		case <-timerC:
			l.wmu.Lock()
			l.syncNow()
			l.wmu.Unlock()
		case <-l.quit:
			for {
				batch = l.gather(batch[:0])
				if len(batch) == 0 {
					break
				}
				l.commit(batch)
				clear(batch)
			}
			if l.opts.Sync == SyncInterval && l.dirty && l.fenced() == nil {
				l.wmu.Lock()
				l.syncNow()
				l.wmu.Unlock()
			}
			return
		}
		timer.Stop()
	}
}

// gather adds queued requests to batch without waiting, up to MaxEntryBytes.
func (l *Log) gather(batch []*request) []*request {
	size := 0
	for _, r := range batch {
		size += r.size
	}
	for size < l.opts.MaxEntryBytes {
		select {
		case r := <-l.queue:
			batch = append(batch, r)
			size += r.size
		default:
			return batch
		}
	}
	return batch
}

func estimate(events []engine.Event) int {
	n := 0
	for i := range events {
		n += 24 + 16*len(events[i].Blocks) + 8*len(events[i].BlockHashes)
	}
	return n
}

// commit writes one entry holding the batches not cancelled, syncs it per
// policy, calls OnCommit and answers the producers.
func (l *Log) commit(batch []*request) {
	taken := batch[:0]
	for _, r := range batch {
		if r.state.CompareAndSwap(reqPending, reqTaken) {
			taken = append(taken, r)
		}
	}
	if len(taken) == 0 {
		return
	}
	if err := l.fenced(); err != nil {
		answer(taken, 0, err)
		return
	}
	// Encode: merged positions, total event count, then every event.
	var positions []Position
	nev := 0
	for _, r := range taken {
		nev += len(r.events)
		for _, p := range r.positions {
			positions = mergePosition(positions, p)
		}
	}
	raw := appendPositions(l.raw[:0], positions)
	raw = binary.AppendUvarint(raw, uint64(nev))
	for _, r := range taken {
		for i := range r.events {
			raw = appendEvent(raw, &r.events[i])
		}
	}
	l.raw = raw
	// Only this goroutine moves l.next (and Open, before it starts).
	index := l.next
	l.buf = frame(l.buf, index, raw)
	data := l.buf

	l.wmu.Lock()
	err := l.store.Write(index, data)
	if err == nil {
		l.next++
		l.dirty = true
		err = l.written(index, len(data))
	}
	if err != nil && l.opts.Sync == SyncInterval {
		// Entries acknowledged in this interval wait for their fsync, and
		// once the log is fenced nothing is synced: sync them now. A failed
		// write is not a failed fsync, after which no fsync could be
		// trusted; the failed entry, if any of it is on disk, is a torn
		// tail that the next open cuts.
		l.syncNow()
	}
	if err != nil {
		// Fenced before wmu is released: TruncateFront, which takes wmu,
		// must see the fence (see there).
		err = l.setFence(fmt.Errorf("entry %d: %w", index, err))
	}
	l.wmu.Unlock()
	if err != nil {
		answer(taken, 0, err)
		return
	}
	l.bytes.Add(uint64(len(data)))
	item := &commitItem{index: index, reqs: append([]*request(nil), taken...), nev: nev, positions: positions}
	if l.toSync != nil {
		l.toSync <- item // the syncer answers once the entry is synced
		return
	}
	l.finish(item)
	if l.opts.Sync == SyncInterval && time.Since(l.lastSync) >= l.opts.SyncInterval {
		l.syncNow()
	}
}

// written records that entry index (n payload bytes) is written: on a
// segment rollover it fsyncs the directory and moves Log's descriptor to
// the new tail segment, then publishes index as lastWritten.
func (l *Log) written(index uint64, n int) error {
	before, after := l.rolled(n)
	l.fdMu.Lock()
	defer l.fdMu.Unlock()
	if before || after {
		newest := index
		if after {
			newest = index + 1
		}
		// Named before the directory fsync, which makes both the new
		// segment and its mark durable before any entry in it is
		// acknowledged (see tailmark.go).
		if err := writeTailMark(l.dir, newest); err != nil {
			return err
		}
		if err := l.opts.dirSync(l.dir); err != nil {
			return err
		}
		if err := l.reopenTail(); err != nil {
			return err
		}
		if after {
			l.tailSize = 0
		} else {
			var tmp [binary.MaxVarintLen64]byte
			l.tailSize = binary.PutUvarint(tmp[:], uint64(n)) + n
		}
	}
	l.lastWritten = index
	return nil
}

// finish calls OnCommit for a committed entry and answers its producers.
func (l *Log) finish(it *commitItem) {
	l.entries.Add(1)
	l.events.Add(uint64(it.nev))
	l.appends.Add(uint64(len(it.reqs)))
	var results []error
	if l.opts.OnCommit != nil {
		events := it.reqs[0].events
		if len(it.reqs) > 1 {
			events = make([]engine.Event, 0, it.nev)
			for _, r := range it.reqs {
				events = append(events, r.events...)
			}
		}
		results = l.opts.OnCommit(Entry{Index: it.index, Events: events, Positions: it.positions})
	}
	if len(results) != it.nev {
		answer(it.reqs, it.index, nil)
		return
	}
	for _, r := range it.reqs {
		n := len(r.events)
		r.done <- result{index: it.index, results: results[:n:n]}
		results = results[n:]
	}
}

// syncLoop is the syncer goroutine (SyncAlways): it fsyncs once for every
// entry written since its last fsync, so the committer keeps writing while
// an fsync runs, then finishes those entries in index order.
func (l *Log) syncLoop() {
	defer close(l.syncerDone)
	var items []*commitItem
	for it := range l.toSync {
		items = append(items[:0], it)
	drain:
		for {
			select {
			case it, ok := <-l.toSync:
				if !ok {
					break drain
				}
				items = append(items, it)
			default:
				break drain
			}
		}
		// Every item was sent after its index became lastWritten, so
		// this fsync covers them all.
		err := l.syncTail()
		for _, it := range items {
			if err != nil {
				answer(it.reqs, 0, err)
			} else {
				l.finish(it)
			}
		}
		clear(items)
	}
}

// syncNow syncs for SyncInterval (and Close); a failure fences the log.
func (l *Log) syncNow() {
	if !l.dirty || l.fenced() != nil {
		return
	}
	if l.syncTail() == nil {
		l.dirty = false
		l.lastSync = time.Now()
	}
}

// syncTail fsyncs the tail segment (every fsync of entries goes through
// it). After a failed fsync, the next one on the same descriptor can
// succeed although the pages the failure dropped are lost (Linux reports a
// writeback error once): so the fence is checked, and a failure fences the
// log, while fdMu is held, and no fsync ever follows a failed one.
func (l *Log) syncTail() error {
	l.fdMu.Lock()
	defer l.fdMu.Unlock()
	if err := l.fenced(); err != nil {
		return err
	}
	if l.tailFile == nil {
		return fmt.Errorf("wal %s: %w", l.dir, ErrClosed)
	}
	if err := l.store.Sync(); err != nil {
		return l.setFence(fmt.Errorf("sync: %w", err))
	}
	l.syncs.Add(1)
	return nil
}

// rolled mirrors tidwall/wal's segment rollover rule for one entry of n
// payload bytes: before tells whether a new segment was created before the
// entry was written (the entry is in it), after whether one was created
// after it (the entry is in the old, synced segment).
func (l *Log) rolled(n int) (before, after bool) {
	size := l.tailSize
	if size > l.opts.SegmentSize {
		before, size = true, 0
	}
	var tmp [binary.MaxVarintLen64]byte
	size += binary.PutUvarint(tmp[:], uint64(n)) + n
	if size >= l.opts.SegmentSize {
		after, size = true, 0
	}
	l.tailSize = size
	return before, after
}

func answer(rs []*request, index uint64, err error) {
	for _, r := range rs {
		r.done <- result{index: index, err: err}
	}
}

func mergePosition(ps []Position, p Position) []Position {
	for i := range ps {
		if ps[i].Source == p.Source {
			ps[i].Seq = p.Seq
			return ps
		}
	}
	return append(ps, p)
}

// FirstIndex returns the index of the first entry; FirstIndex() >
// LastIndex() when the log is empty (a new log has 1 and 0).
func (l *Log) FirstIndex() (uint64, error) {
	i, err := l.tw.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("wal %s: %w", l.dir, err)
	}
	return i, nil
}

// LastIndex returns the index of the last entry written.
func (l *Log) LastIndex() (uint64, error) {
	i, err := l.tw.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("wal %s: %w", l.dir, err)
	}
	return i, nil
}

// TruncateFront removes every entry before index, which becomes the first
// (index = LastIndex()+1 empties the log), then fsyncs the directory. A
// fenced log refuses (ErrFenced): tidwall/wal keeps a failed write's entry
// in its memory, and a truncation inside the tail segment rewrites that
// segment from memory, which would put the failed batch on disk for the
// next open to replay. A truncation to an entry that a short or missing
// segment before the last has lost fails with an [EntryError] (ErrCorrupt)
// and changes nothing.
func (l *Log) TruncateFront(index uint64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.fenced(); err != nil {
		return fmt.Errorf("truncate front to %d: %w", index, err)
	}
	if err := l.truncateFront(index); err != nil {
		if errors.Is(err, twal.ErrCorrupt) {
			// The segment that should hold entry index is short or the
			// one holding it is missing: damage to name, not a crash of
			// the process that asked for a routine truncation.
			seg, off := locate(l.dir, index)
			return fmt.Errorf("truncate front to %d: %w", index,
				&EntryError{Dir: l.dir, Segment: seg, Offset: off, Entry: index, Err: fmt.Errorf("%v: %w", err, ErrCorrupt)})
		}
		return fmt.Errorf("wal %s: truncate front to %d: %w", l.dir, index, err)
	}
	// tidwall/wal may have replaced the tail segment file: until Log's
	// descriptor follows, an fsync would cover the old file, so a failure
	// here fences the log.
	if err := l.opts.dirSync(l.dir); err != nil {
		return l.setFence(fmt.Errorf("truncate front: %w", err))
	}
	l.fdMu.Lock()
	defer l.fdMu.Unlock()
	if l.tailFile == nil {
		// Close ran meanwhile (the truncation is done and durable): a
		// descriptor opened now would never be closed.
		return nil
	}
	if err := l.reopenTail(); err != nil {
		return l.setFence(fmt.Errorf("truncate front: %w", err))
	}
	return nil
}

// truncateFront runs tidwall/wal's TruncateFront under guard (it panics
// as read's Read does, for the same damage). It panics there before it
// writes or removes anything, so the log on disk and in memory is as it
// was.
func (l *Log) truncateFront(index uint64) error {
	return l.guard(func() error { return l.tw.TruncateFront(index) })
}

// Sync fsyncs the tail segment, so that every entry written so far is on
// disk whatever the sync policy: a snapshot must not cover entries that an
// OS crash could take from the WAL (recovery would then find the WAL ending
// before its newest snapshot). A failure fences the log.
func (l *Log) Sync() error {
	return l.syncTail()
}

// Entries iterates over the entries from index from (0 = the first) to the
// last one, the log's end being re-read when reached. A read or decoding
// failure is yielded once as an error naming the segment and byte offset,
// and ends the iteration. from before FirstIndex yields ErrTruncated.
// Reads are serialised with other readers; the iterator may run while
// producers append.
func (l *Log) Entries(from uint64) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		first, err := l.FirstIndex()
		if err != nil {
			yield(Entry{}, err)
			return
		}
		if from == 0 {
			from = first
		}
		if from < first {
			yield(Entry{}, fmt.Errorf("wal %s: read from %d, first index is %d: %w", l.dir, from, first, ErrTruncated))
			return
		}
		last, err := l.LastIndex()
		if err != nil {
			yield(Entry{}, err)
			return
		}
		for i := from; ; i++ {
			if i > last {
				if last, err = l.LastIndex(); err != nil {
					yield(Entry{}, err)
					return
				}
				if i > last {
					return
				}
			}
			e, err := l.ReadEntry(i)
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

// ReadEntry reads and decodes the entry at index.
func (l *Log) ReadEntry(index uint64) (Entry, error) {
	data, err := l.read(index)
	if err != nil {
		if !errors.Is(err, twal.ErrCorrupt) {
			return Entry{}, fmt.Errorf("wal %s: read entry %d: %w", l.dir, index, err)
		}
		// A segment before the last that is missing, short or badly framed:
		// tidwall/wal has no word for it but its own ErrCorrupt (or a panic).
		seg, off := locate(l.dir, index)
		return Entry{}, &EntryError{Dir: l.dir, Segment: seg, Offset: off, Entry: index, Err: fmt.Errorf("%v: %w", err, ErrCorrupt)}
	}
	events, positions, err := decodeEntry(data, index)
	if err != nil {
		seg, off := locate(l.dir, index)
		return Entry{}, &EntryError{Dir: l.dir, Segment: seg, Offset: off, Entry: index, Err: asCorrupt(err)}
	}
	return Entry{Index: index, Events: events, Positions: positions}, nil
}

// read reads one entry's payload from tidwall/wal under guard.
func (l *Log) read(index uint64) (data []byte, err error) {
	err = l.guard(func() (err error) {
		data, err = l.tw.Read(index)
		return err
	})
	return data, err
}

// guard runs fn, a call into tidwall/wal, serialised with reads (its
// concurrent reads of segments other than the tail can panic). tidwall/wal
// v1.2.1 also indexes past the end of a segment when the one after it is
// missing or the segment is short (a panic, not an error): that is
// reported as its ErrCorrupt.
func (l *Log) guard(fn func() error) (err error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tidwall/wal panicked: %v: %w", p, twal.ErrCorrupt)
		}
	}()
	return fn()
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	return Stats{
		TornBytesDropped: l.torn,
		Entries:          l.entries.Load(),
		Appends:          l.appends.Load(),
		Events:           l.events.Load(),
		Bytes:            l.bytes.Load(),
		Syncs:            l.syncs.Load(),
		Fenced:           l.fence.Load() != nil,
	}
}

// Close commits what is pending, syncs (unless SyncNone or fenced), closes
// tidwall/wal and releases the directory lock it took. Later Appends fail
// with ErrClosed. Close is idempotent. A log fenced by a failed write or
// fsync (Close's own final fsync included) returns the fencing error, which
// wraps ErrFenced.
func (l *Log) Close() error {
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		<-l.closeDone // a concurrent first Close may still be closing
		return l.closeErr
	}
	l.closed = true
	l.closeMu.Unlock()
	defer close(l.closeDone)
	close(l.quit)
	<-l.stopped
	var errs []error
	// A fenced log failed a write or an fsync, the final one included: under
	// SyncInterval, entries already acknowledged may not be on disk, and the
	// caller (a server shutting down) must say so rather than report a clean
	// stop.
	if err := l.fenced(); err != nil {
		errs = append(errs, err)
	}
	l.fdMu.Lock()
	l.tailFile.Close()
	l.tailFile = nil
	l.fdMu.Unlock()
	if err := l.tw.Close(); err != nil && l.fenced() == nil {
		errs = append(errs, fmt.Errorf("wal %s: close: %w", l.dir, err))
	}
	// A fenced log's files are left as they are for the next Open.
	if len(errs) == 0 {
		if err := trimUnused(l.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if l.ownLock {
		if err := l.lock.Unlock(); err != nil {
			errs = append(errs, err)
		}
	}
	l.closeErr = errors.Join(errs...)
	return l.closeErr
}
