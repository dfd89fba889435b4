package recovery

// Live operation.
//
// [Store.Append] writes a batch to the WAL under its sync policy; the WAL's
// commit hook applies each committed entry to the index, under the store's
// mutex, before the producer is answered, so the commit order is the apply
// order and [Store.Applied] always names the last applied entry.
//
// [Store.Snapshot] takes a consistent cut (a [engine.Index.Freeze] copy,
// the applied index and the positions, under the mutex: event application
// pauses only for the copy), writes it outside the mutex, publishes it, keeps
// the newest K snapshots ([Options.KeepSnapshots], default 2) and only then
// truncates the WAL front, up to the oldest retained snapshot, and not at
// all while fewer than K snapshots exist: a damaged newest snapshot can
// always fall back to the previous one (K >= 2) with a longer replay. A
// Snapshot when nothing was applied since the last snapshot this Store wrote
// or loaded returns that snapshot without writing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// Options configure [Open]. The zero value is valid.
type Options struct {
	// Sync, SyncInterval, MaxPending, MaxEntryBytes and SegmentSize are
	// passed to the WAL (see [wal.Options]); Sync defaults to
	// [wal.SyncAlways].
	Sync          wal.SyncPolicy
	SyncInterval  time.Duration
	MaxPending    int
	MaxEntryBytes int
	SegmentSize   int
	// KeepSnapshots is K: how many snapshots are kept, and how many must
	// exist before the WAL front is truncated (up to the oldest kept one).
	// Default 2; 1 leaves no fallback if the only snapshot is damaged.
	KeepSnapshots int
	// Logger receives recovery progress and reports; default slog.Default().
	Logger *slog.Logger
	// ProgressInterval is the least time between two progress reports of
	// a snapshot load or of the WAL replay; default 1s.
	ProgressInterval time.Duration
	// WrapStore, if set, wraps the file layer the WAL writes through (see
	// [wal.Options]): metrics and fault injection.
	WrapStore func(wal.Store) wal.Store
	// ReserveHolderBlocks and ReserveWorkerKeys, when both are positive,
	// size the index for that many holder-blocks and worker keys (see
	// [engine.Index.Reserve]) once the snapshot is loaded, before the WAL
	// replays into it.
	ReserveHolderBlocks, ReserveWorkerKeys int
}

// SnapshotRef names a snapshot file and its WAL index.
type SnapshotRef struct {
	Path  string
	Index uint64
}

// SkippedSnapshot is a snapshot recovery did not use, and why.
type SkippedSnapshot struct {
	Path   string
	Index  uint64
	Reason string
}

// Report tells what [Open] found and did.
type Report struct {
	DataDir string
	// Created: the directory held no data; a new index was started.
	Created bool
	// TempFilesRemoved are interrupted snapshot writes deleted at startup.
	TempFilesRemoved []string
	// SnapshotUsed is the snapshot loaded (zero when none: full replay).
	SnapshotUsed SnapshotRef
	// SnapshotsSkipped are the newer snapshots rejected, with the reason.
	SnapshotsSkipped []SkippedSnapshot
	// ReplayedEntries, ReplayedEvents and ReplayedBlockOps count what was
	// replayed from the WAL after the snapshot (block ops: stored blocks
	// plus removed block hashes); ReplayRejected the events the index
	// rejected, as it did live.
	ReplayedEntries, ReplayedEvents, ReplayedBlockOps, ReplayRejected uint64
	// TornBytesDropped is what the WAL cut off a torn tail.
	TornBytesDropped int64
	// FirstIndex and LastIndex are the WAL's after open (First > Last: empty).
	FirstIndex, LastIndex uint64
	// SnapshotLoad, Replay and Duration time the snapshot load, the WAL
	// replay and the whole Open.
	SnapshotLoad, Replay, Duration time.Duration
}

// Store is a recovered index with its WAL open for appends and its
// snapshots. Its methods are safe for concurrent use.
type Store struct {
	dir     string
	snapDir string
	opts    Options
	logger  *slog.Logger
	lock    *wal.DirLock
	log     *wal.Log
	ix      *engine.Index
	report  Report

	// mu serialises event application and the snapshot cut.
	mu        sync.Mutex
	applied   uint64
	positions []wal.Position

	// snapMu serialises Snapshot calls (and Close with them).
	snapMu   sync.Mutex
	lastSnap SnapshotRef
	haveSnap bool
	// unusable holds the WAL indexes of the snapshots recovery skipped and
	// left in place (it could not read them, or the WAL does not reach back
	// to them): pruning must not count them among the snapshots it keeps,
	// nor truncate the WAL up to them. Guarded by snapMu.
	unusable map[uint64]bool
	// counted holds the WAL indexes of the snapshots known to count among
	// those kept: the one recovery loaded, those this Store wrote, and
	// older ones that opened with a meta matching their name. Guarded by
	// snapMu.
	counted   map[uint64]bool
	closed    atomic.Bool
	closeErr  error
	closeOnce sync.Once

	// hook, if set, is called at the phases of Snapshot (tests).
	hook func(phase string, index uint64)
	// freeSpace returns the free bytes of a directory's filesystem
	// (freeBytes; tests replace it).
	freeSpace func(dir string) (int64, error)
	// lastSize is the size of the last snapshot written or loaded (see
	// roomFor); nil before the first.
	lastSize atomic.Pointer[snapshotSize]
	// space pauses appends while free space is low (see appendRoom).
	space spaceGuard
}

// Open opens the data directory dir, creating it if needed, recovers its
// index (see the top of recover.go) and returns it ready for appends.
// It fails, changing nothing but an interrupted snapshot's temporary file
// and the WAL's torn tail, when the directory's history cannot be recovered
// whole; and, before it opens the WAL, when this process cannot write the
// snapshots directory.
func Open(ctx context.Context, dir string, opts Options) (_ *Store, err error) {
	if dir == "" {
		// filepath.Clean would make it the current directory.
		return nil, errors.New("recovery: open: the data directory path is empty")
	}
	start := time.Now()
	if opts.KeepSnapshots < 1 {
		opts.KeepSnapshots = 2
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = time.Second
	}
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		// Else the first file inside it fails, as "open DIR/FORMAT: not a
		// directory", which reads as a file missing in a directory.
		return nil, fmt.Errorf("data dir %s is not a directory", dir)
	}
	s := &Store{
		dir:     dir,
		snapDir: filepath.Join(dir, SnapshotDirName),
		opts:    opts,
		logger:  opts.Logger.With("data_dir", dir),
		report:  Report{DataDir: dir},

		freeSpace: freeBytes,
	}
	// Refuse a newer format before touching anything.
	if _, err := CheckFormat(dir); err != nil {
		return nil, err
	}
	s.lock, err = wal.LockDir(filepath.Join(dir, WALDirName))
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			if s.log != nil {
				s.log.Close()
			}
			s.lock.Unlock()
		}
	}()
	v, err := CheckFormat(dir)
	if err != nil {
		return nil, err
	}
	if v == 0 {
		if err := initDir(dir); err != nil {
			return nil, err
		}
		s.report.Created = true
	} else if err := os.MkdirAll(s.snapDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	// Checked before the WAL is opened: a snapshots directory this process
	// cannot write (a read-only mount, another owner) otherwise fails only
	// at the first snapshot, after the node started serving and appending,
	// and the WAL, never truncated, then grows until the disk is full.
	// Plan, which must not write, predicts it from the access check
	// (writable); a start asks the filesystem itself, so that a prediction
	// that is wrong (a kernel without faccessat2, where access(2) ignores
	// the capabilities a service may run with) never refuses a start that
	// would work.
	if err := snapshot.CheckWritable(s.snapDir); err != nil {
		return nil, fmt.Errorf("data dir %s: %w: snapshots could not be written", dir, err)
	}
	s.initSpace()
	if s.report.TempFilesRemoved, err = snapshot.CleanTemp(s.snapDir); err != nil {
		return nil, err
	}
	for _, p := range s.report.TempFilesRemoved {
		s.logger.Info("removed the temporary file of an interrupted snapshot", "path", p)
	}
	s.log, err = wal.Open(filepath.Join(dir, WALDirName), &wal.Options{
		Sync:          opts.Sync,
		SyncInterval:  opts.SyncInterval,
		MaxPending:    opts.MaxPending,
		MaxEntryBytes: opts.MaxEntryBytes,
		SegmentSize:   opts.SegmentSize,
		OnCommit:      s.onCommit,
		Logger:        opts.Logger,
		DirLock:       s.lock,
		WrapStore:     opts.WrapStore,
	})
	if err != nil {
		var mt *wal.MissingTailError
		if errors.As(err, &mt) {
			return nil, &refusal{msg: fmt.Sprintf("data dir %s: refusing to start: %s", dir, missingTailRefusal(dir, mt)),
				err: fmt.Errorf("%w: %w", ErrUnrecoverable, err)}
		}
		if msg := DamageRefusal(ctx, dir, err); msg != "" {
			if cerr := ctx.Err(); cerr != nil { // see DamageErr
				return nil, fmt.Errorf("data dir %s: %w", dir, interruptedJudging(err, cerr))
			}
			return nil, &refusal{msg: fmt.Sprintf("data dir %s: %s: %v", dir, msg, wal.ErrCorrupt), err: err}
		}
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	s.report.TornBytesDropped = s.log.Stats().TornBytesDropped
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	if v != 0 && v < FormatVersion {
		// Once the directory is known good (an Open that refuses it must
		// leave it as it was, for the kvidx that wrote it), and before
		// anything is appended in the new format (see FormatVersion).
		if err := writeFormat(dir); err != nil {
			return nil, err
		}
		s.logger.Info("upgraded the data directory's format", "from", v, "to", FormatVersion)
	}
	s.readSpace() // for the stats, before any append
	s.report.Duration = time.Since(start)
	r := &s.report
	s.logger.Info("recovered",
		"snapshot", r.SnapshotUsed.Path, "snapshot_index", r.SnapshotUsed.Index,
		"snapshots_skipped", len(r.SnapshotsSkipped),
		"replayed_entries", r.ReplayedEntries, "replayed_block_ops", r.ReplayedBlockOps,
		"wal_first", r.FirstIndex, "wal_last", r.LastIndex, "torn_bytes", r.TornBytesDropped,
		"duration", r.Duration)
	return s, nil
}

// onCommit is the WAL's commit hook: it applies a committed entry, under
// mu, exactly as replay does.
func (s *Store) onCommit(e wal.Entry) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	results, _ := s.applyEntry(&e)
	return results
}

// applyEntry applies e's events in order, then sets the applied index and
// merges its positions. It returns per-event results (nil if none failed)
// and the number of block ops. Called with mu held, or during recovery.
func (s *Store) applyEntry(e *wal.Entry) (results []error, ops int) {
	for i := range e.Events {
		ev := &e.Events[i]
		ops += len(ev.Blocks) + len(ev.BlockHashes)
		if err := s.ix.Apply(ev); err != nil {
			if results == nil {
				results = make([]error, len(e.Events))
			}
			results[i] = err
		}
	}
	s.applied = e.Index
	for _, p := range e.Positions {
		s.positions = mergePosition(s.positions, p)
	}
	return results, ops
}

func mergePosition(ps []wal.Position, p wal.Position) []wal.Position {
	for i := range ps {
		if ps[i].Source == p.Source {
			ps[i].Seq = p.Seq
			return ps
		}
	}
	return append(ps, p)
}

// Append writes one batch (events and the source positions it reaches) to
// the WAL and applies it to the index before returning: durable under the
// sync policy, in commit order. results holds one entry per event, the
// error the index rejected it with (nil when none was rejected). The caller
// must not modify events until Append returns. While the WAL's filesystem
// is nearly full, Append takes nothing and fails with an error wrapping
// [ErrLowSpace] (and so [wal.ErrOverloaded]): retry later.
func (s *Store) Append(ctx context.Context, events []engine.Event, positions []wal.Position) (index uint64, results []error, err error) {
	if s.closed.Load() {
		return 0, nil, fmt.Errorf("data dir %s: %w", s.dir, wal.ErrClosed)
	}
	done, err := s.appendRoom(s.appendCost(events, positions))
	if err != nil {
		return 0, nil, err
	}
	defer done()
	return s.log.AppendResults(ctx, events, positions)
}

// Snapshot writes the index as of the last applied entry to a new snapshot
// and returns its path and WAL index, then keeps the newest K snapshots and
// truncates the WAL front up to the oldest one kept (once K exist). If
// nothing was applied since the last snapshot this Store wrote or loaded
// (and its file is still there), it returns that one without writing.
// Calls are serialised; appends pause only while the state is copied. A
// path returned with an error is of a snapshot published: what failed is
// the pruning or the WAL truncation after it (retried by the next call).
func (s *Store) Snapshot(ctx context.Context) (path string, index uint64, err error) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.closed.Load() {
		return "", 0, fmt.Errorf("data dir %s: snapshot: %w", s.dir, wal.ErrClosed)
	}
	// Make room for the copy before taking mu, which applies need: only
	// the copy itself should hold them up.
	s.ix.PrepareFreeze()
	s.mu.Lock()
	index = s.applied
	if s.haveSnap && s.lastSnap.Index == index {
		if _, err := os.Stat(s.lastSnap.Path); err == nil {
			s.mu.Unlock()
			// Nothing new to write, but retention still applies: a store
			// opened with a lower KeepSnapshots than the one that wrote
			// the directory (kvidx recover --keep 1 after a clean stop)
			// prunes and truncates now.
			if err := s.retain(index); err != nil {
				return s.lastSnap.Path, index, err
			}
			return s.lastSnap.Path, index, nil
		}
	}
	f := s.ix.Freeze()
	sources := make([]snapshot.Source, len(s.positions))
	for i, p := range s.positions {
		sources[i] = snapshot.Source{Name: p.Source, Seq: p.Seq}
	}
	s.mu.Unlock()

	// Under SyncInterval and SyncNone the entries up to index may be
	// written but not yet on disk: a snapshot published before them would,
	// after an OS crash, be newer than the WAL's end, and recovery would
	// refuse to start.
	if err := s.log.Sync(); err != nil {
		f.Release(s.ix)
		return "", 0, fmt.Errorf("data dir %s: snapshot: %w", s.dir, err)
	}
	st := f.Stats()
	free, need, err := s.roomFor(st.Entries, st.HolderBlocks)
	if err != nil {
		f.Release(s.ix)
		return "", 0, err
	}
	if need > 0 {
		// Until the snapshot is written and the WAL truncated, its file
		// takes the room the append guard keeps for it.
		s.beginSnapshotSpace(free, need)
		defer s.endSnapshotSpace()
	}
	s.phase("write", index)
	start := time.Now()
	path, err = snapshot.Write(ctx, s.snapDir, f, snapshot.Meta{Index: index, Sources: sources})
	pause := f.Pause()
	f.Release(s.ix)
	if err != nil {
		return "", 0, fmt.Errorf("data dir %s: %w", s.dir, err)
	}
	s.lastSnap, s.haveSnap = SnapshotRef{Path: path, Index: index}, true
	s.phase("published", index)
	s.logger.Info("snapshot written", "path", path, "index", index, "duration", time.Since(start), "apply_pause", pause)
	delete(s.unusable, index) // the file under its name is the one just written
	s.count(index)
	s.noteSnapshotSize(path, st.Entries, st.HolderBlocks)
	if err := s.retain(index); err != nil {
		return path, index, err
	}
	return path, index, nil
}

// retain applies the retention rule after a snapshot at index: it keeps the
// newest KeepSnapshots usable snapshots and truncates the WAL up to the
// oldest kept one.
func (s *Store) retain(index uint64) error {
	removed, err := snapshot.Prune(s.snapDir, s.opts.KeepSnapshots, s.usable)
	for _, p := range removed {
		s.logger.Info("snapshot pruned", "path", p)
		// What was known of a file that is gone no longer applies: without
		// this the maps grew by one entry a snapshot for as long as the
		// node ran.
		if n, ok := snapshot.ParseFileName(filepath.Base(p)); ok {
			delete(s.counted, n)
			delete(s.unusable, n)
		}
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w", s.dir, err)
	}
	s.phase("pruned", index)
	if err := s.truncateWAL(); err != nil {
		return err
	}
	s.phase("truncated", index)
	return nil
}

// usable reports whether f may count among the snapshots kept. Recovery
// stops at the first snapshot it can use, so older ones were never read in
// this process: one that another build wrote, or that cannot be read, or
// whose meta disagrees with its name (another session found it unusable
// and left it in place) must not count, or pruning would delete the good
// fallback behind it and truncate the WAL up to it. Each is opened once
// (meta and worker table, not the data) before it first counts.
func (s *Store) usable(f snapshot.File) bool {
	if s.unusable[f.Index] {
		return false
	}
	if s.counted[f.Index] {
		return true
	}
	r, err := snapshot.Open(f.Path)
	if err == nil {
		if m := r.Meta(); m.Index != f.Index {
			err = errors.New(MisnamedReason(m.Index, f))
		}
		r.Close()
	}
	if err != nil {
		s.logger.Warn("snapshot not counted among those kept", "path", f.Path, "err", err)
		if s.unusable == nil {
			s.unusable = map[uint64]bool{}
		}
		s.unusable[f.Index] = true
		return false
	}
	s.count(f.Index)
	return true
}

// count records that the snapshot at index counts among those kept.
func (s *Store) count(index uint64) {
	if s.counted == nil {
		s.counted = map[uint64]bool{}
	}
	s.counted[index] = true
}

func (s *Store) phase(p string, index uint64) {
	if s.hook != nil {
		s.hook(p, index)
	}
}

// truncateWAL removes the WAL entries at or before the oldest of the K
// newest snapshots, once K exist: every entry after it stays, so any kept
// snapshot can be recovered from.
func (s *Store) truncateWAL() error {
	snaps, err := snapshot.List(s.snapDir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", s.dir, err)
	}
	snaps = slices.DeleteFunc(snaps, func(f snapshot.File) bool { return !s.usable(f) })
	k := s.opts.KeepSnapshots
	if len(snaps) < k {
		return nil
	}
	oldest := snaps[k-1].Index
	first, err := s.log.FirstIndex()
	if err != nil {
		return err
	}
	if oldest+1 <= first {
		return nil
	}
	if err := s.log.TruncateFront(oldest + 1); err != nil {
		return fmt.Errorf("data dir %s: %w", s.dir, err)
	}
	s.logger.Debug("wal truncated", "first_index", oldest+1, "oldest_snapshot", snaps[k-1].Path)
	return nil
}

// Index returns the index. Queries may run on it at any time; events must
// go through [Store.Append].
func (s *Store) Index() *engine.Index { return s.ix }

// Applied returns the index of the last applied WAL entry and the source
// positions it reaches (merged, last value per source).
func (s *Store) Applied() (uint64, []wal.Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied, slices.Clone(s.positions)
}

// Report returns what Open found and did.
func (s *Store) Report() Report {
	r := s.report
	r.TempFilesRemoved = slices.Clone(r.TempFilesRemoved)
	r.SnapshotsSkipped = slices.Clone(r.SnapshotsSkipped)
	return r
}

// WALStats returns the WAL's counters.
func (s *Store) WALStats() wal.Stats { return s.log.Stats() }

// WALRange returns the WAL's first and last index (first > last when it
// holds no entry).
func (s *Store) WALRange() (first, last uint64, err error) {
	if first, err = s.log.FirstIndex(); err != nil {
		return 0, 0, err
	}
	if last, err = s.log.LastIndex(); err != nil {
		return 0, 0, err
	}
	return first, last, nil
}

// Dir returns the data directory.
func (s *Store) Dir() string { return s.dir }

// Close waits for a running Snapshot, closes the WAL (committing what is
// pending) and releases the directory lock. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.snapMu.Lock()
		defer s.snapMu.Unlock()
		s.closeErr = errors.Join(s.log.Close(), s.lock.Unlock())
	})
	return s.closeErr
}

// DamageRefusal returns the message refusing err, damage inside the WAL of
// dataDir (a [wal.DamageError]), with the repair to run, naming dataDir;
// "" when err is no such damage. When a snapshot holds the damaged entry,
// the repair is --truncate-before (it loses nothing acknowledged): a cut
// after the damage, which the WAL's own message names, would end the log
// before that snapshot, and kvidx wal repair refuses it. Recovery's refusal
// and the offline tools that predict it use it alike.
//
// The snapshots past the damage are verified whole, which takes a while
// for large ones: once ctx is done, the ones not yet verified are not, and
// the message says so (a SIGINT to kvidx serve waited for every one).
func DamageRefusal(ctx context.Context, dataDir string, err error) string {
	var (
		de      *wal.DamageError
		ee      *wal.EntryError
		mt      *wal.MissingTailError
		where   string
		entry   uint64
		explain func(dataDir string) string
	)
	switch {
	case errors.As(err, &mt):
		return missingTailRefusal(dataDir, mt)
	case errors.As(err, &de):
		where, entry, explain = de.Where(), de.Entry, de.Refusal
	case errors.As(err, &ee):
		where, entry, explain = ee.Where(), ee.Entry, ee.Refusal
	default:
		return ""
	}
	snaps, lerr := snapshot.List(filepath.Join(dataDir, SnapshotDirName))
	// The snapshot that a cut after the damage would end the log before,
	// as recovery and the repair judge it (a copy under a wrong name whose
	// meta is before the damage does not count).
	f, ok := EndProof(snaps, entry-1)
	if lerr != nil || !ok || f.Index < entry {
		return explain(dataDir)
	}
	// The repair verifies the snapshot it relies on: advise one that
	// verifies (found by review: advice naming a damaged snapshot was
	// refused, and so was the cut after the damage, which it ends the log
	// before).
	var bad, stuck []string
	for _, c := range snaps { // newest first
		if c.Index < entry {
			break
		}
		index, rename := c.Index, ""
		if m, why := Misnamed(c); why != "" {
			if m < entry {
				continue // holds no more than the cut keeps
			}
			// The repair verifies the snapshot's name against its meta.
			index, rename = m, fmt.Sprintf("rename it %s, then ", snapshot.FileName(m))
		}
		interrupted := func() string {
			return fmt.Sprintf("%s; snapshot %s, past the damage, was not verified (interrupted): a cut after the damage would end the log before it, which kvidx refuses; "+
				"kvidx recover --data-dir %s --dry-run names the repair",
				explain(dataDir), filepath.Base(c.Path), wal.ShellArg(dataDir))
		}
		if ctx.Err() != nil {
			return interrupted()
		}
		if err := VerifySnapshot(ctx, c.Path); err != nil {
			if ctx.Err() != nil {
				return interrupted()
			}
			if !SnapshotDamaged(c.Path, err) {
				// Not known damaged (found by review: the cut renamed a
				// newer build's snapshot and dropped entries it held).
				return fmt.Sprintf("%s; snapshot %s, past the damage, cannot be read here (%v) but is not known to be damaged: "+
					"fix that (another build's format wants that build; permissions or a lock, their owner) or move it out of %s, then ask again (kvidx recover --data-dir %s --dry-run)",
					where, filepath.Base(c.Path), err, filepath.Join(dataDir, SnapshotDirName), wal.ShellArg(dataDir))
			}
			bad = append(bad, fmt.Sprintf("%s: %v", filepath.Base(c.Path), err))
			continue
		}
		if !wal.Locatable(filepath.Join(dataDir, WALDirName), index+1) {
			// The entry after it is damaged or missing too: a cut before
			// it would be refused (found by review: the advice sent the
			// operator to such a cut, and the cut back here).
			stuck = append(stuck, filepath.Base(c.Path))
			continue
		}
		return fmt.Sprintf("%s; snapshot %s holds every entry up to %d, the damaged entry %d included, and verifies: "+
			"%skvidx wal repair %s --truncate-before %d --yes drops the entries up to %d (it verifies that snapshot first) and loses nothing acknowledged "+
			"(a cut after the damage would end the log before that snapshot, which kvidx refuses)",
			where, filepath.Base(c.Path), index, entry, rename, wal.ShellArg(dataDir), index+1, index)
	}
	msg := explain(dataDir)
	if len(stuck) > 0 {
		msg += fmt.Sprintf("; snapshot %s, past the damage, cannot be continued (the entry after it is missing or damaged too): move it out of %s first, or the cut is refused",
			strings.Join(stuck, ", "), filepath.Join(dataDir, SnapshotDirName))
	}
	if len(bad) == 0 {
		return msg
	}
	return fmt.Sprintf("%s; no snapshot past it verifies (%s): the cut renames them *%s first, as recovery does",
		msg, strings.Join(bad, "; "), DamagedSuffix)
}

// VerifySnapshot opens the snapshot at path and checks all of it (every
// chunk and checksum): what a repair that relies on it checks first.
func VerifySnapshot(ctx context.Context, path string) error {
	r, err := snapshot.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Verify(ctx)
}

// missingTailRefusal explains a WAL that lost its newest segments (see
// wal.MissingTailError). A snapshot past the entries left holds the lost
// ones up to its index: the way out is then the repair that makes the WAL
// continue after it, as when the WAL ends before a snapshot; otherwise, a
// cut that accepts the loss.
func missingTailRefusal(dataDir string, mt *wal.MissingTailError) string {
	snaps, err := snapshot.List(filepath.Join(dataDir, SnapshotDirName))
	if f, ok := EndProof(snaps, mt.LastEntry); err == nil && ok && f.Index > mt.LastEntry {
		held := f.Index
		if m, why := Misnamed(f); why != "" {
			held = m
		}
		return fmt.Sprintf("%s; %s; or, if they are gone for good: %s (the entries after %d that the missing segments held are lost)",
			mt.Where(), wal.PutBack, WALBehindSnapshot(dataDir, f, mt.LastEntry), held)
	}
	return mt.Refusal(dataDir)
}

// DamageErr is err explained by [DamageRefusal] when it is damage inside the
// WAL of dataDir (errors.Is and errors.As still see err), else err.
//
// When ctx is done by the time the refusal is judged (kvidx serve's SIGINT
// while the snapshots past the damage are verified), the error wraps ctx's
// instead: an interrupted startup, not a refusal that could not say which
// repair applies.
func DamageErr(ctx context.Context, dataDir string, err error) error {
	msg := DamageRefusal(ctx, dataDir, err)
	if msg == "" {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return interruptedJudging(err, cerr)
	}
	return &refusal{msg: msg, err: err}
}

// interruptedJudging is the error of a refusal of the damage err that the
// context error cerr cut short.
func interruptedJudging(err, cerr error) error {
	return fmt.Errorf("interrupted while judging the damage (%v): %w", err, cerr)
}

// refusal is an error with a message of its own that wraps the error it
// explains (errors.Is and errors.As still see it).
type refusal struct {
	msg string
	err error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.err }
