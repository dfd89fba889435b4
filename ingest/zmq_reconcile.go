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
// otherwise apply batches the other's clear then wiped. It returns an error
// only when ctx ends (then some sources may be left unreconciled, which the
// next start does).
func ReconcileZMQ(ctx context.Context, srcs ...*ZMQSource) error {
	for _, s := range srcs {
		if err := s.Reconcile(ctx); err != nil {
			return err
		}
	}
	return nil
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
// of the endpoint starts from nothing, as after a changed worker id. Each
// endpoint cleared is logged (Info). An endpoint of a WAL from before
// kvidx recorded the worker id cannot be cleared (which id it fed is not
// known): it is named in a Warn, and DELETE /v1/workers/ID removes its
// blocks. A refused append is retried with backoff; ForgetRemovedZMQ
// returns an error only when ctx ends (the endpoints left are cleared at
// the next start). Call it, like [ReconcileZMQ], before any source runs.
func ForgetRemovedZMQ(ctx context.Context, store Store, opts ZMQOptions, srcs ...*ZMQSource) error {
	_, positions := store.Applied()
	var unknown []string
	for _, name := range removedSources(positions, srcs) {
		f := NewZMQSource(ZMQSpec{Endpoint: strings.TrimPrefix(name, "zmq:")}, store, opts)
		f.log = f.opts.Logger.With("source", name) // no worker id configured
		f.restore()
		if !f.haveWorker {
			unknown = append(unknown, f.spec.Endpoint)
			continue
		}
		if err := f.forget(ctx); err != nil {
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
// worker id and marks it forgotten (see [ForgetRemovedZMQ]), unless it is
// already: nothing fed, its sequence voided. The source's state is the
// store's (restore) and its worker id recorded (haveWorker).
func (s *ZMQSource) forget(ctx context.Context) error {
	var ranks []uint32
	for r := range s.ranks {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	var events []engine.Event
	switch {
	case s.ranksUnknown:
		events = []engine.Event{{Worker: engine.WorkerKey{WorkerID: s.worker}, Kind: engine.KindWorkerRemoved}}
	case len(ranks) == 0 && s.reset:
		return nil // forgotten already
	default:
		for _, r := range ranks {
			events = append(events, engine.Event{Worker: engine.WorkerKey{WorkerID: s.worker, DPRank: r}, Kind: engine.KindCleared})
		}
	}
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
	if s.ranksUnknown {
		s.log.Info("zmq endpoint recorded in the WAL is no longer configured: removed the worker id it fed (which of its DP ranks it fed is not recorded); the endpoint is forgotten",
			"endpoint", s.spec.Endpoint, "old_worker_id", s.worker)
		return nil
	}
	s.log.Info("zmq endpoint recorded in the WAL is no longer configured: cleared the DP ranks it fed its worker id; the endpoint is forgotten",
		"endpoint", s.spec.Endpoint, "old_worker_id", s.worker, "cleared_dp_ranks", ranks)
	return nil
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
// store, call [ReconcileZMQ] for all of them before running any.
func (s *ZMQSource) Reconcile(ctx context.Context) error {
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
	events := make([]engine.Event, len(ranks))
	reset := make([]wal.Position, 0, len(ranks)+5)
	reset = append(reset,
		wal.Position{Source: s.name + workerMark, Seq: s.spec.WorkerID},
		wal.Position{Source: s.name + resetMark, Seq: 1},
		wal.Position{Source: s.name + tsMark, Seq: 0},
		wal.Position{Source: s.name + groupsMark, Seq: 0},
		wal.Position{Source: s.name + ranksMark, Seq: 1})
	for i, r := range ranks {
		events[i] = engine.Event{Worker: engine.WorkerKey{WorkerID: old, DPRank: r}, Kind: engine.KindCleared}
		reset = append(reset, wal.Position{Source: s.rankPosition(r).Source, Seq: 0})
	}
	if s.ranksUnknown {
		// The ranks the endpoint fed the old id are unknown (a WAL from
		// before ranks were recorded): the old id goes, as a clear
		// removes it then.
		events = []engine.Event{{Worker: engine.WorkerKey{WorkerID: old}, Kind: engine.KindWorkerRemoved}}
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
	s.log.Info("zmq endpoint's worker id changed since the WAL recorded it: cleared what it fed the old id; the new id starts from nothing, with "+from,
		"old_worker_id", old, "cleared_dp_ranks", ranks)
	return nil
}
