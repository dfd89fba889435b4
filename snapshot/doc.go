// Package snapshot writes a frozen engine state ([engine.Frozen]) to a bbolt
// file and reads it back into a fresh [engine.Index], so that recovery
// replays only the write-ahead log entries after the snapshot's WAL index N.
//
// # File layout
//
// One bbolt file, snapshot-<N as 20 digits>.bolt, page size 64 KiB (4 KiB in
// files written before: bbolt reads the size from the file), with three
// buckets:
//
//   - meta: format version, WAL index N, creation time, hashing parameters
//     (seed 1337 and the sequence-chain rule), the counts of entries,
//     holder-blocks, worker keys, places and chunks, the engine counters
//     (JSON), the source positions (JSON, opaque here), a CRC-32C of the
//     data, and a CRC-32C of the other meta keys and values.
//   - workers: the worker-key table, worker index -> key, sorted, 12 bytes a key.
//   - places: chunks of about 62 KiB of places (uncompressed), each one value
//     under the key (first position, chunk number), both big-endian uint32,
//     so keys are in position order. A value is a small header (last
//     position, ordinal of the first place, place and holder-block counts)
//     and a snappy block of compactly encoded places: position deltas,
//     parent as an ordinal distance, tokens hash and seq, holders as
//     worker-index deltas, block hashes raw, except a holder's first when
//     it equals the place's seq, as Dynamo's engines name blocks (format
//     version 2; see chunkHeader). A chunk that snappy would hardly shrink
//     (random block hashes) is stored as a snappy block of one literal.
//     Places are numbered 1, 2, ... in file order; the IDs are not stored.
//     Files of format version 1 (no such omission) are read too.
//
// The data checksum covers the worker table and every chunk key and value
// in order.
//
// # Publishing
//
// [Write] writes a temporary file .snapshot-<N>.tmp-<random> in the target
// directory with bbolt's syncs off and pages filled to 100%, batches of
// chunks per transaction, then syncs the data once, closes, fsyncs the file,
// renames it to its final name and fsyncs the directory. A crash at any
// moment leaves the published set as it was and at most a temporary file,
// which [CleanTemp] removes (at startup; [TempFiles] lists them, read
// only). [Prune] keeps the newest K
// snapshots; call it after a new one is published. [List] returns the
// snapshots newest first.
//
// # Verification
//
// bbolt checksums only its meta pages, so reading checks everything else:
// the file size against bbolt's page count (truncation), the format version,
// a complete meta with its own checksum, the hashing parameters, the worker
// table, every chunk's framing, order and counts, then the data checksum and
// the entry, holder-block and place counts; the engine's loader checks the
// places themselves. bbolt panics and memory faults on a damaged file are
// recovered. Every defect is an error matching [ErrCorrupt] that reads
// "snapshot <path>: <defect>", so recovery can fall back to an older
// snapshot.
//
// [Open] gives a [Reader] for inspection tools: meta, worker table, and
// [Reader.Scan] over a position range and a set of workers, which reads only
// the chunks that can hold such places (a scan of every position also checks
// the data checksum and the chunk, place and holder-block counts; the count
// of entries is checked by [Load] and [Reader.Verify]).
package snapshot
