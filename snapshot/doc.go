// Package snapshot writes a frozen engine state ([engine.Frozen]) to a bbolt
// file and reads it back into a fresh [engine.Index], so that recovery
// replays only the write-ahead log entries after the snapshot's WAL index N.
//
// It knows engine types and nothing of the WAL: the source positions it
// stores are opaque to it, and package recovery decides which snapshot to
// load, when to write one and how many to keep.
//
// Entry points: [Write] publishes a snapshot of index N as
// snapshot-<N as 20 digits>.bolt; [Load] (or [LoadWith]) verifies one and
// builds an index from it; [Open] gives a [Reader] for inspection tools,
// with [Reader.Scan] over positions and workers and [Reader.Verify];
// [Check] lists every defect of a file and [Diff] compares two, streaming
// (kvidx inspect verify and diff); [List], [Prune], [CleanTemp] and
// [TempFiles] manage a snapshot directory.
//
// Guarantees (the file named holds the details):
//
//   - A file holds exactly the places of one frozen state, in position
//     order, in chunks that a scan can read selectively; format versions 1
//     and 2 are read (format.go).
//   - Publishing is atomic: a crash at any moment leaves the published set
//     as it was and at most a temporary file, which [CleanTemp] removes
//     (write.go).
//   - Reading checks everything bbolt does not (sizes, checksums, counts,
//     order), and every defect, bbolt panics and memory faults included, is
//     an error matching [ErrCorrupt] naming the file, so recovery can fall
//     back to an older snapshot (read.go).
//   - A sound file of another kvidx build (a newer format, another hash
//     seed or sequence rule) also matches [ErrIncompatible] (read.go).
package snapshot
