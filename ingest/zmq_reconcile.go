package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// ReconcileZMQ reconciles every source with what the store recorded of
// it ([ZMQSource.Reconcile]) before any of them runs: a source whose
// endpoint now feeds another worker id clears what it fed the old one, and
// when two endpoints swap their ids, a source that started first would
// otherwise apply batches the other's clear then wiped. A DP rank of the
// old id that another of srcs fed too and feeds still (two endpoints
// configured with one worker id, or two spellings of one endpoint) is not
// cleared: see [stillFed]. It returns an error only when ctx ends (then
// some sources may be left unreconciled, which the next start does).
func ReconcileZMQ(ctx context.Context, srcs ...*ZMQSource) error {
	for _, s := range srcs {
		if err := s.reconcile(ctx, feeding(srcs, s.name)); err != nil {
			return err
		}
	}
	return nil
}

// stillFed is what configured sources go on feeding, as the WAL records
// it: keys holds each (worker id, DP rank) a source fed and feeds still,
// whole each worker id a source feeds whose ranks fed are not recorded (a
// WAL from before ranks were recorded, see ranksUnknown: any rank of the
// id may hold its blocks), each with the endpoints feeding it.
//
// A clear of what an endpoint fed (a removed one's, [ForgetRemovedZMQ]; a
// changed worker id's, [ReconcileZMQ]) keeps the blocks of those keys,
// while it still forgets the endpoint's positions. The index holds one set
// of blocks per key, not one per endpoint: it cannot tell the cleared
// endpoint's blocks from the configured one's, and clearing the key wiped
// the configured engine's too, which that engine still holds and never
// announces again (it sends one BlockStored per block stored), so matches
// lost them for good. Kept, the blocks both fed (all of them when the two
// endpoints are one engine, spelled two ways) go as the configured engine
// removes them, and any the cleared endpoint alone stored go at that
// engine's next clear (a restart, a gap, an undecodable batch): stale
// credit for a while rather than a live engine's blocks lost. The keys the
// cleared endpoint fed alone are still cleared.
type stillFed struct {
	keys  map[engine.WorkerKey][]string
	whole map[uint64][]string
}

// feeding returns what srcs, but the source named skip, go on feeding (see
// stillFed). A source feeds still the "#dp" ranks the WAL records it fed
// when its recorded worker id is its configured one, or none is recorded
// (which Reconcile leaves as is); one whose id changed forgets those ranks
// at its Reconcile, so it feeds none of them, whether that Reconcile ran
// already or not (the answer does not depend on the order of the calls).
func feeding(srcs []*ZMQSource, skip string) stillFed {
	f := stillFed{keys: map[engine.WorkerKey][]string{}, whole: map[uint64][]string{}}
	for _, s := range srcs {
		if s.name == skip {
			continue
		}
		// A copy restored from the store: s itself is restored by its own
		// Reconcile, or by Run.
		o := NewZMQSource(s.spec, s.store, s.opts)
		o.restore()
		if o.haveWorker && o.worker != o.spec.WorkerID {
			continue
		}
		w := o.spec.WorkerID
		if o.ranksUnknown {
			f.whole[w] = append(f.whole[w], o.spec.Endpoint)
			continue
		}
		for r := range o.ranks {
			k := engine.WorkerKey{WorkerID: w, DPRank: r}
			f.keys[k] = append(f.keys[k], o.spec.Endpoint)
		}
	}
	return f
}

// split returns the ranks of worker that no configured source feeds (to
// clear) and those one does (kept), with the endpoints feeding the kept
// ones, sorted. ranks is sorted.
func (f stillFed) split(worker uint64, ranks []uint32) (cleared, kept []uint32, by []string) {
	for _, r := range ranks {
		eps := f.keys[engine.WorkerKey{WorkerID: worker, DPRank: r}]
		if len(eps) == 0 && len(f.whole[worker]) == 0 {
			cleared = append(cleared, r)
			continue
		}
		kept = append(kept, r)
		by = append(append(by, eps...), f.whole[worker]...)
	}
	slices.Sort(by)
	return cleared, kept, slices.Compact(by)
}

// feedersOf returns the endpoints feeding any rank of worker, sorted: a
// WorkerRemoved of it would wipe their blocks.
func (f stillFed) feedersOf(worker uint64) []string {
	by := slices.Clone(f.whole[worker])
	for k, eps := range f.keys {
		if k.WorkerID == worker {
			by = append(by, eps...)
		}
	}
	slices.Sort(by)
	return slices.Compact(by)
}

// ForgetRemovedZMQ clears what the endpoints the store records positions
// of ([Store.Applied]) but none of srcs follows (an endpoint configured at
// an earlier start and not now, or spelled otherwise now, as
// tcp://localhost:5557 for tcp://127.0.0.1:5557) fed: nothing follows their
// engines any more, so their blocks could only go stale. For each such
// endpoint one atomic Append holds a Cleared event for each DP rank of the
// recorded worker id ("zmq:<endpoint>#worker") the endpoint fed (a
// WorkerRemoved of that id when its ranks are unknown, as
// [ZMQSource.Reconcile] does) and the positions that mark the endpoint
// forgotten: its ranks forgotten, its sequence voided ("#reset"), ts and
// groups reset. So a later start clears nothing more, and a later re-add
// of the endpoint starts from nothing, as after a changed worker id. A DP
// rank one of srcs fed too and feeds still (two spellings of one endpoint
// configured together once, two endpoints given one worker id) is not
// cleared, nor the worker id removed when one of srcs feeds any of its
// ranks: see [stillFed]; the endpoint is forgotten all the same. Each
// endpoint cleared, and each whose blocks are kept so, is logged (Info; a
// Warn when the worker id is kept whole). An endpoint of a WAL from before
// kvidx recorded the worker id cannot be cleared (which id it fed is not
// known): it is named in a Warn, and DELETE /v1/workers/ID removes its
// blocks. A refused append is retried with backoff; ForgetRemovedZMQ
// returns an error only when ctx ends (the endpoints left are cleared at
// the next start). Call it, like [ReconcileZMQ], before any source runs.
func ForgetRemovedZMQ(ctx context.Context, store Store, opts ZMQOptions, srcs ...*ZMQSource) error {
	_, positions := store.Applied()
	fed := feeding(srcs, "")
	var unknown []string
	for _, name := range removedSources(positions, srcs) {
		f := NewZMQSource(ZMQSpec{Endpoint: strings.TrimPrefix(name, "zmq:")}, store, opts)
		f.log = f.opts.Logger.With("source", name) // no worker id configured
		f.restore()
		if !f.haveWorker {
			unknown = append(unknown, f.spec.Endpoint)
			continue
		}
		if err := f.forget(ctx, fed); err != nil {
			return err
		}
	}
	if len(unknown) > 0 {
		lg := opts.Logger
		if lg == nil {
			lg = slog.Default()
		}
		lg.Warn("zmq endpoints recorded in the WAL are no longer configured, but the WAL does not record the worker id they fed (it is from before kvidx recorded it), so their blocks are not cleared: DELETE /v1/workers/ID removes a worker id's blocks (this warning comes at every start while the WAL records these endpoints)",
			"endpoints", unknown)
	}
	return nil
}

// removedSources returns the names ("zmq:<endpoint>") of the ZMQ
// endpoints the positions record that none of srcs is, sorted. An
// endpoint may itself hold '#' and a mark's name (ipc:///run/kv#dp1,
// ipc:///tmp/e#ts): a position that is an endpoint's sequence (the
// positions hold one of its marks: "#ts", "#worker", "#dp0", ...) names
// that endpoint, not the one its name cut at its last mark would give
// (ipc:///run/kv, an endpoint never configured, then warned about at every
// start). Any mark counts: a WAL from before kvidx recorded "#ts" holds
// only an endpoint's sequence and its "#dp" ranks.
func removedSources(positions []wal.Position, srcs []*ZMQSource) []string {
	// marked: the names a position's mark follows ("zmq:<endpoint>").
	marked := make(map[string]bool, len(positions))
	for _, p := range positions {
		if base := baseSource(p.Source); base != p.Source {
			marked[base] = true
		}
	}
	var names []string
	for _, p := range positions {
		if !strings.HasPrefix(p.Source, "zmq:") || slices.ContainsFunc(srcs, func(s *ZMQSource) bool { return s.owns(p.Source) }) {
			continue
		}
		if marked[p.Source] {
			names = append(names, p.Source)
			continue
		}
		names = append(names, baseSource(p.Source))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// owns reports whether position name source is one of the source's.
func (s *ZMQSource) owns(source string) bool {
	rest, ok := strings.CutPrefix(source, s.name)
	if !ok {
		return false
	}
	switch rest {
	case "", tsMark, groupsMark, workerMark, resetMark, ranksMark:
		return true
	}
	_, ok = s.rankOf(source)
	return ok
}

// baseSource returns the source name ("zmq:<endpoint>") of position name
// source: source without its mark ("#ts", "#dp3", ...), if any.
func baseSource(source string) string {
	for _, m := range []string{tsMark, groupsMark, workerMark, resetMark, ranksMark} {
		if base, ok := strings.CutSuffix(source, m); ok {
			return base
		}
	}
	if i := strings.LastIndex(source, rankMark); i >= 0 {
		if _, err := strconv.ParseUint(source[i+len(rankMark):], 10, 32); err == nil {
			return source[:i]
		}
	}
	return source
}

// forget clears what the endpoint, followed no more, fed its recorded
// worker id, but the keys the configured sources still feed (fed), and
// marks it forgotten (see [ForgetRemovedZMQ]), unless it is already:
// nothing fed, its sequence voided. The source's state is the store's
// (restore) and its worker id recorded (haveWorker).
func (s *ZMQSource) forget(ctx context.Context, fed stillFed) error {
	var ranks []uint32
	for r := range s.ranks {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	if len(ranks) == 0 && s.reset && !s.ranksUnknown {
		return nil // forgotten already
	}
	events, cleared, kept, by := fed.clearOf(s.worker, ranks, s.ranksUnknown)
	forgotten := make([]wal.Position, 0, len(ranks)+4)
	forgotten = append(forgotten,
		wal.Position{Source: s.name + resetMark, Seq: 1},
		wal.Position{Source: s.name + tsMark, Seq: 0},
		wal.Position{Source: s.name + groupsMark, Seq: 0},
		wal.Position{Source: s.name + ranksMark, Seq: 1})
	for _, r := range ranks {
		forgotten = append(forgotten, wal.Position{Source: s.rankPosition(r).Source, Seq: 0})
	}
	if _, err := s.appendRetrying(ctx, events, forgotten, func() string {
		return fmt.Sprintf("clearing worker %d, which endpoint %s fed and no --zmq endpoint follows now", s.worker, s.spec.Endpoint)
	}); err != nil {
		return err
	}
	switch {
	case s.ranksUnknown && len(by) > 0:
		s.log.Warn("zmq endpoint recorded in the WAL is no longer configured, and configured endpoints feed DP ranks of the worker id it fed: kept that id's blocks (which of its ranks the endpoint fed is not recorded, and removing the id would wipe the blocks of the configured engines, which still hold them); what it fed on ranks no configured endpoint feeds stays until the id is removed (DELETE /v1/workers/ID, which removes the configured endpoints' blocks too); the endpoint is forgotten",
			"endpoint", s.spec.Endpoint, "old_worker_id", s.worker, "fed_by", by)
	case s.ranksUnknown:
		s.log.Info("zmq endpoint recorded in the WAL is no longer configured: removed the worker id it fed (which of its DP ranks it fed is not recorded); the endpoint is forgotten",
			"endpoint", s.spec.Endpoint, "old_worker_id", s.worker)
	default:
		if len(by) > 0 {
			s.log.Info("zmq endpoint recorded in the WAL is no longer configured, and configured endpoints fed DP ranks of its worker id that it fed too: kept those ranks' blocks (the index cannot tell whose they are, and the configured engines still hold theirs; the stale ones go as those engines remove blocks, or at their next clear)",
				"endpoint", s.spec.Endpoint, "old_worker_id", s.worker, "kept_dp_ranks", kept, "fed_by", by)
		}
		// A clear is logged only when one was appended: with every rank
		// kept, a "cleared" line naming no rank said what did not happen.
		if len(cleared) > 0 {
			s.log.Info("zmq endpoint recorded in the WAL is no longer configured: cleared the DP ranks it fed its worker id; the endpoint is forgotten",
				"endpoint", s.spec.Endpoint, "old_worker_id", s.worker, "cleared_dp_ranks", cleared)
		} else {
			s.log.Info("zmq endpoint recorded in the WAL is no longer configured: the endpoint is forgotten",
				"endpoint", s.spec.Endpoint, "old_worker_id", s.worker)
		}
	}
	return nil
}

// clearOf returns the events that forget what an endpoint fed worker:
// ranks, or the whole id when ranksUnknown. The ranks the configured
// sources still feed are kept (see stillFed), and with ranksUnknown the
// id is removed only when none of them feeds any of its ranks (a
// WorkerRemoved would wipe theirs; which ranks the endpoint fed is not
// known, so none can be cleared alone). It returns too the ranks cleared
// and kept, and the endpoints feeding the kept ones (none: nothing kept).
func (f stillFed) clearOf(worker uint64, ranks []uint32, ranksUnknown bool) (events []engine.Event, cleared, kept []uint32, by []string) {
	if ranksUnknown {
		if by = f.feedersOf(worker); len(by) > 0 {
			return nil, nil, nil, by
		}
		return clearing(worker, nil, true), nil, nil, nil
	}
	cleared, kept, by = f.split(worker, ranks)
	return clearing(worker, cleared, false), cleared, kept, by
}

// Reconcile reads the source's state from the store and, when the worker
// id the WAL records for the endpoint ("zmq:<endpoint>#worker") is not the
// configured one, forgets what the endpoint fed the old id: one atomic
// Append holds a Cleared event for each DP rank of the old id the endpoint
// fed (its "#dp" positions; a WorkerRemoved of the old id when those are
// unknown, as after an upgrade from a WAL that recorded none, see
// ranksUnknown), the new id, those ranks forgotten, and the
// endpoint's sequence, ts and groups reset, so that the new id starts from
// nothing, as after an engine restart (with a replay endpoint the source
// asks from 0, else it takes the live stream). A WAL without the id
// recorded (from before kvidx recorded it) changes nothing. Once the id
// recorded is the configured one, Reconcile does nothing, so a restart
// after it (or a crash before the first batch) finds the same state. A
// refused append is retried with backoff; Reconcile returns an error only
// when ctx ends. [ZMQSource.Run] calls it; with several sources on one
// store, call [ReconcileZMQ] for all of them before running any (which
// also keeps the blocks of the old id's ranks another of them still feeds).
func (s *ZMQSource) Reconcile(ctx context.Context) error {
	return s.reconcile(ctx, stillFed{})
}

// reconcile is Reconcile, but the old id's ranks that other configured
// sources still feed (fed) are not cleared (forgotten all the same, as
// this endpoint feeds them no more): see [stillFed].
func (s *ZMQSource) reconcile(ctx context.Context, fed stillFed) error {
	s.restore()
	if !s.haveWorker || s.worker == s.spec.WorkerID {
		return nil
	}
	old := s.worker
	_, positions := s.store.Applied()
	var ranks []uint32
	for _, p := range positions {
		if r, ok := s.rankOf(p.Source); ok && p.Seq != 0 {
			ranks = append(ranks, r)
		}
	}
	slices.Sort(ranks)
	ranks = slices.Compact(ranks)
	// With the ranks the endpoint fed the old id unknown (a WAL from
	// before ranks were recorded), events removes the old id, as a clear
	// removes it then, unless another source feeds ranks of it (clearOf).
	wasUnknown := s.ranksUnknown
	events, cleared, kept, by := fed.clearOf(old, ranks, wasUnknown)
	reset := make([]wal.Position, 0, len(ranks)+5)
	reset = append(reset,
		wal.Position{Source: s.name + workerMark, Seq: s.spec.WorkerID},
		wal.Position{Source: s.name + resetMark, Seq: 1},
		wal.Position{Source: s.name + tsMark, Seq: 0},
		wal.Position{Source: s.name + groupsMark, Seq: 0},
		wal.Position{Source: s.name + ranksMark, Seq: 1})
	for _, r := range ranks {
		reset = append(reset, wal.Position{Source: s.rankPosition(r).Source, Seq: 0})
	}
	if _, err := s.appendRetrying(ctx, events, reset, func() string {
		return fmt.Sprintf("clearing worker %d, which endpoint %s fed before its worker id became %d", old, s.spec.Endpoint, s.spec.WorkerID)
	}); err != nil {
		return err
	}
	s.worker, s.reset, s.ranksUnknown = s.spec.WorkerID, true, false
	s.have, s.last, s.lastTS, s.groups = false, 0, 0, 0
	s.dec.SetPartialGroups(0)
	clear(s.ranks)
	s.mu.Lock()
	s.stats.HasSeq, s.stats.LastSeq, s.stats.HighestSeq = false, 0, 0
	if len(events) > 0 {
		s.stats.Clears++
		s.stats.Events += uint64(len(events))
	}
	s.mu.Unlock()
	from := "the live stream"
	if s.spec.Replay != "" {
		from = "a replay from sequence 0"
	}
	switch {
	case wasUnknown && len(by) > 0:
		s.log.Warn("zmq endpoint's worker id changed since the WAL recorded it, and other configured endpoints feed DP ranks of the old id: kept the old id's blocks (which of its ranks the endpoint fed is not recorded, and removing the id would wipe the blocks of the other engines, which still hold them); what it fed on ranks no configured endpoint feeds stays until the id is removed (DELETE /v1/workers/ID, which removes the other endpoints' blocks too); the new id starts from nothing, with "+from,
			"old_worker_id", old, "fed_by", by)
		return nil
	case wasUnknown:
		s.log.Info("zmq endpoint's worker id changed since the WAL recorded it: removed the old id (which of its DP ranks the endpoint fed is not recorded); the new id starts from nothing, with "+from,
			"old_worker_id", old)
		return nil
	case len(by) > 0:
		s.log.Info("zmq endpoint's worker id changed since the WAL recorded it, and other configured endpoints fed DP ranks of the old id that it fed too: kept those ranks' blocks (the index cannot tell whose they are, and the other engines still hold theirs; the stale ones go as those engines remove blocks, or at their next clear)",
			"old_worker_id", old, "kept_dp_ranks", kept, "fed_by", by)
	}
	// A clear is logged only when one was appended: with every rank kept
	// (or none fed), a "cleared" line naming no rank said what did not
	// happen.
	if len(cleared) > 0 {
		s.log.Info("zmq endpoint's worker id changed since the WAL recorded it: cleared what it fed the old id; the new id starts from nothing, with "+from,
			"old_worker_id", old, "cleared_dp_ranks", cleared)
	} else {
		s.log.Info("zmq endpoint's worker id changed since the WAL recorded it; the new id starts from nothing, with "+from,
			"old_worker_id", old)
	}
	return nil
}
