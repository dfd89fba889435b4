package ingest

import (
	"context"
	"fmt"
	"slices"

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
	backoff := s.opts.MinBackoff
	for {
		_, _, err := s.store.Append(ctx, events, reset)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.fail(ReasonAppend, fmt.Errorf("clearing worker %d, which endpoint %s fed before its worker id became %d: %w (retrying)", old, s.spec.Endpoint, s.spec.WorkerID, err))
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, s.opts.MaxBackoff)
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
