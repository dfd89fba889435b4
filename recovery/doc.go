// Package recovery brings a kvidx router node back, after a crash or a
// restart, with exactly the index its acknowledged events produced: not
// older (lost events), not fuller (removed blocks revived).
//
// It is where the layers meet: package wal and package snapshot know
// engine types but not each other, and recovery joins them to an
// [engine.Index] in a durable [Store], which package node serves and the
// event sources (package ingest, ingest/jetstream) append to.
//
//	DATA_DIR/FORMAT       "kvidx-data 2\n"; a newer format is refused, a
//	                      format 1 directory upgraded in place when opened
//	DATA_DIR/wal/         the write-ahead log (package wal), its LOCK, and
//	                      TAIL, the newest segment written
//	DATA_DIR/snapshots/   snapshots (package snapshot), newest K kept
//
// One process owns a data directory: [Open] first takes the WAL directory's
// lock ([wal.LockDir]) and hands it to the log, so a second Open fails with
// an error wrapping [wal.ErrLocked]. A missing or empty directory starts a
// new, empty index.
//
// Entry points: [Open] recovers and returns the [Store]; [Store.Append],
// [Store.Snapshot], [Store.Applied] and [Store.Close] run it. [Plan] finds,
// read-only and without the lock, what Open would do with a directory
// (kvidx recover --dry-run, kvidx inspect summary DATA_DIR), with Open's own
// choices ([CheckFormat], [ChooseSnapshot]); [MoveAsideDamaged] and
// [CoveringSnapshot] judge the snapshots against a cut of the WAL, for kvidx
// wal repair (plan.go, cut.go).
//
// Guarantees (the file named holds the details):
//
//   - Open loads the newest snapshot that verifies and that the WAL reaches
//     back to, then replays every later entry exactly as a live append
//     applies it (recover.go).
//   - Open refuses to start, naming every snapshot and why it was rejected,
//     rather than start with silent data loss: a gap or damage in the WAL, a
//     snapshot newer than the WAL's end, or no snapshot-plus-WAL that covers
//     the history (recover.go).
//   - The commit order is the apply order: an entry is applied before its
//     producer is answered (store.go).
//   - The WAL front is truncated only up to the oldest of the K snapshots
//     kept, so a damaged newest snapshot falls back to the previous one
//     (store.go).
//   - On low disk space appends pause with a retriable [ErrLowSpace] rather
//     than fence the WAL, and resume by themselves (space.go).
package recovery
