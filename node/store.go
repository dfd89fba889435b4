package node

import (
	"context"
	"errors"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

// Store is what the server needs from the durable index (package recovery
// provides it). Every method must be safe for concurrent use.
type Store interface {
	// Index returns the live index that Append applies to; queries read it.
	Index() *engine.Index
	// Append logs events as one atomic WAL batch and applies them once
	// durable under the sync policy. It returns the WAL index of the entry
	// holding them and results[i], the engine's Apply error for events[i]
	// (nil when applied). err wraps wal.ErrOverloaded when the commit queue
	// is full or appends pause while the disk is nearly full (then it
	// wraps recovery.ErrLowSpace too), and wal.ErrFenced after a write or
	// fsync failure; then nothing of the batch was acknowledged.
	Append(ctx context.Context, events []engine.Event, positions []wal.Position) (index uint64, results []error, err error)
	// Snapshot writes and publishes a snapshot of the index, returning its
	// file and the WAL index it covers. A path with an error: the snapshot
	// was published, and what follows it (pruning, WAL truncation) failed.
	Snapshot(ctx context.Context) (path string, index uint64, err error)
	// Applied returns the WAL index of the last entry applied to the index.
	Applied() (index uint64, positions []wal.Position)
	// WALStats returns the WAL's counters.
	WALStats() wal.Stats
	// WALRange returns the first and last index in the WAL (0, 0 when empty).
	WALRange() (first, last uint64, err error)
}

// recoveryReporter is a Store opened by recovery (recovery.Store is), whose
// report says what the restart replayed.
type recoveryReporter interface {
	Report() recovery.Report
}

// spaceGuard is a Store that pauses appends while its disk is nearly full
// (recovery.Store does): the snapshotter then takes a snapshot, whose
// retention may truncate the WAL, and the metrics and stats report it.
type spaceGuard interface {
	// LowSpace reports whether appends are paused (reading the free space
	// when a reading is due).
	LowSpace() bool
	// FreeSpace returns the free bytes last read and the floor below
	// which appends pause; checked is false when they were never read.
	FreeSpace() (free, floor int64, checked bool)
}

// lowSpace reports whether st pauses appends for lack of free space.
func lowSpace(st Store) bool {
	g, ok := st.(spaceGuard)
	return ok && g.LowSpace()
}

// lowSpace reports whether the server's store pauses appends for lack of
// free space.
func (s *Server) lowSpace() bool {
	st := s.currentStore()
	return st != nil && lowSpace(st)
}

// SourceStore is the store an event source (ZMQ, NATS) appends through: the
// server's store, whose successful appends count towards
// Config.SnapshotEveryEvents as HTTP ingest's do, and whose fencing error
// puts the server in the Fenced phase. Get one with [Server.SourceStore].
type SourceStore struct {
	srv *Server
	st  Store
}

// SourceStore returns the store for event sources over st (the store
// given to SetStore).
func (s *Server) SourceStore(st Store) *SourceStore { return &SourceStore{srv: s, st: st} }

// Append appends through the store and counts what it appended.
func (ss *SourceStore) Append(ctx context.Context, events []engine.Event, positions []wal.Position) (uint64, []error, error) {
	index, results, err := ss.st.Append(ctx, events, positions)
	switch {
	case err == nil:
		ss.srv.snaps.appended(len(events))
	case errors.Is(err, wal.ErrFenced):
		ss.srv.SetFenced(err)
	case errors.Is(err, recovery.ErrLowSpace):
		ss.srv.snaps.poke()
	}
	return index, results, err
}

// Applied returns the store's applied WAL index and source positions.
func (ss *SourceStore) Applied() (uint64, []wal.Position) { return ss.st.Applied() }
