// Package wal is kvidx's durable event log: batches of [engine.Event] in
// github.com/tidwall/wal segment files, one directory per log, one writer per
// directory (an flock on [LockFileName], see [LockDir]).
//
// It knows engine types but never applies events: package recovery joins
// it to the snapshots and the index, and the event sources append through
// recovery's Store. Each entry is one group commit and carries
// source positions ([Position]), so that a source resumes exactly once.
//
// Entry points: [Open] (takes the lock, cuts a torn tail, starts the
// committer), [Log.Append] and [Log.AppendResults] (concurrent producers),
// [Log.Entries] and [Log.ReadEntry] (replay), [Log.TruncateFront] (after a
// snapshot), [Log.Close]. [Inspect], [Scan], [FindGaps] and [Segments]
// read a directory without changing it; [RepairTruncateAfter],
// [RepairTruncateBefore] and [RepairTrimStray] are the operator's repairs.
//
// Guarantees, one line each (the file named holds the details):
//
//   - An entry is checked on every read: a CRC-32C and its own index, so a
//     renamed or copied segment is refused, not replayed as other entries
//     (codec.go).
//   - Group commit never splits a producer's batch, and [Options.OnCommit]
//     sees entries in index order: the commit order is the apply order
//     (log.go).
//   - Under [SyncAlways] (the default) nothing acknowledged is lost, even on
//     power loss; [SyncInterval] and [SyncNone] trade a bounded or unbounded
//     loss window on an OS crash for speed (log.go).
//   - A write or fsync failure fences the log: every later Append fails with
//     [ErrFenced] until it is reopened (log.go).
//   - The last segment is preallocated, so an fsync skips a journal commit;
//     the fill after the entries is unused space, not a torn tail, and Open
//     and Close trim it (prealloc.go).
//   - Open cuts only a torn tail (logged, counted in [Stats]); damage with a
//     valid entry after it is refused ([DamageError], [ErrCorrupt]), never
//     skipped, naming the segment file and byte offset (repair.go).
//   - A log that lost its newest segments is refused, not read as a shorter
//     log ([MissingTailError], tailmark.go).
//   - Read-only access renames, truncates, deletes and locks nothing, so it
//     is safe on a running server's directory (readonly.go).
package wal
