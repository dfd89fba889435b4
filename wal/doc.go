// Package wal is kvidx's durable event log: batches of [engine.Event] in
// github.com/tidwall/wal segment files, one directory per log, one writer per
// directory (an flock on [LockFileName], see [LockDir]).
//
// # Entries
//
// One tidwall/wal entry holds one batch: the events of one or more Append
// calls, in commit order, plus generic source positions ([Position], e.g.
// source name -> last sequence number, merged last-wins) so event sources can
// resume exactly once. The payload is a compact binary encoding (uvarints,
// fixed 8-byte hashes) of every event field, compressed as a whole with snappy
// (block format) and framed as: 1 format-version byte, the CRC-32C
// (Castagnoli) of what follows, the entry's own index (uvarint), the
// compressed bytes. The index makes an entry read at any other index (a
// segment file renamed, or copied from another log: tidwall/wal numbers
// entries by the files' names) an error instead of the wrong entry; frames
// of version 1, written before, carry no index and are still read. A
// payload shorter than the frame (zero bytes appended to a segment read as
// empty entries in tidwall/wal) is invalid.
//
// # Group commit
//
// [Log.Append] is called concurrently by many producers. One committer
// goroutine takes everything pending (bounded by [Options.MaxPending]; beyond
// it Append fails with [ErrOverloaded]) and writes it as ONE entry, never
// splitting a producer's batch, syncs per policy (under SyncAlways a syncer
// goroutine fsyncs while the committer writes the next entries, one fsync
// covering every entry written before it started), calls [Options.OnCommit]
// with the entry's events (in index order: the commit order is the apply
// order), then answers each producer with the entry's index. A write or fsync
// failure fails every batch of the entry and fences the log: every later
// Append fails with [ErrFenced] until the log is reopened.
//
// # Sync policies and loss windows
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
// # Preallocated tail
//
// While the log is open its last segment is filled up to
// [Options.SegmentSize] with a fill byte (0xA5), and tidwall/wal's appends
// overwrite the fill in place: an fsync that writes into blocks the file
// already has skips the journal commit an appending one needs, which made
// group commit about half again as fast here. Only the last segment ever
// ends in fill (tidwall/wal moves to a new segment once entries reach that
// size). Fill from the end of the entries to the end of the segment is
// unused space, not a torn tail: [Open] and [Log.Close] trim it, and the
// read-only walk reports it as [Layout].UnusedBytes. Anything else after
// the entries (a partial entry, zeros) is a torn tail. Overwriting in place
// means that a power loss can keep an older page of the segment under a
// newer one: a hole of fill, then valid entries. Open refuses it like
// damage inside the log, naming the repair, rather than cut entries that
// may have been acknowledged (see prealloc.go); the read-only walk, which
// can see such a hole while racing the writer, reads again first.
//
// # Recovery
//
// [Open] repairs a torn tail before tidwall/wal sees it (tidwall's Open fails
// on a partial last entry): it walks the last segment (the one tidwall will
// use as its tail, honouring its .START/.END temporary names) validating
// each entry's frame. If it ends in an incomplete or invalid entry, and no
// complete valid entry starts anywhere in the bytes that would be dropped,
// the segment is truncated after the last good entry, fsynced with its
// directory, and the dropped byte count is logged and kept in
// [Stats].TornBytesDropped. If a valid entry follows the damage, the damage
// is in the middle: Open refuses with an error naming the segment file and
// byte offset. Damage found while reading ([Log.Entries]) is reported the
// same way ([ErrCorrupt]), never skipped; damage Open refuses is a
// [DamageError] naming the entry. [RepairTruncateAfter] and
// [RepairTruncateBefore] are the operator's explicit cuts (after the
// damage, losing what follows, or before it, when a snapshot holds what
// precedes); they keep a copy of what they remove.
//
// A crash during a truncation can leave the file tidwall/wal writes before
// renaming it .START or .END (<index>.START.TEMP, <index>.END.TEMP). While
// the segment it was copied from is there, that truncation never took
// effect and nothing reads the file, so Open deletes it (and logs it)
// rather than keep up to a segment's bytes for each crash. With that
// segment gone (a power loss that kept the removals but not the rename,
// which tidwall/wal does not fsync), the file may be the only copy of
// entries: Open keeps it and logs a warning, and renamed without .TEMP it
// finishes the truncation at the next open. When that segment was the last
// one, TAIL names a segment no longer there and Open refuses the log
// (MissingTailError) before it looks at the file; the refusal names the
// file and the rename to try before any repair.
//
// A log that lost its last segment files reads as a shorter log, so the
// directory's TAIL file names the newest segment written (rewritten at each
// rollover, durable before any entry in that segment is acknowledged), and
// Open refuses a log whose segments end before it ([MissingTailError]).
//
// # Read-only access
//
// [Inspect] and [Scan] read a log directory for inspection tools without
// ever renaming, truncating, deleting or locking anything (safe on a
// running server's directory): they see the segments as tidwall/wal would
// after finishing an interrupted truncation, report a torn tail (what Open
// would cut) instead of cutting it, and name the segment file and byte
// offset of damage inside the log. A segment other than the last whose
// framing breaks anywhere (even in bytes after its whole entries) is
// reported as one gap from its first entry up to the next segment:
// tidwall/wal parses such a segment whole when reading it and fails on
// every entry, though Open, which reads only the last segment, accepts
// the log. [FindGaps] finds the same gaps from the segments' framing
// alone, for recovery to check before a replay; [Segments] lists the
// segment files.
//
// Reads are serialised (tidwall/wal v1.2.1 can panic on concurrent reads of
// non-tail segments).
package wal
