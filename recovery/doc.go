// Package recovery brings a kvidx router node back, after a crash or a
// restart, with exactly the index its acknowledged events produced: not
// older (lost events), not fuller (removed blocks revived).
//
// # Data directory
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
// # Recovery
//
// [Open] removes the temporary files of interrupted snapshot writes, opens
// the WAL (which cuts a torn tail itself) and checks its segment files fit
// end to end. It then picks the newest snapshot that verifies and that the
// WAL reaches back to (WAL first index <= snapshot index + 1, counted after
// the last gap between segments), loads it and replays every entry after the
// snapshot's index, in order, applying each event exactly as a live append
// does (rejections count in the engine's counters the same way). Source
// positions start from the snapshot's and merge each entry's, last value per
// source winning. With no usable snapshot the whole WAL is replayed, and it
// must then begin at index 1.
//
// Open refuses to start, naming every snapshot and why it was rejected and
// the WAL's first and last index, when no snapshot-plus-WAL combination
// covers the history; when a published snapshot is newer than the WAL's last
// entry (acknowledged entries are missing); or when the WAL is damaged or has
// a gap in the entries to replay. It never starts with silent data loss.
// Long snapshot loads and replays log their progress at most once a second.
//
// tidwall/wal neither checks that its segment files follow each other nor
// survives reading an entry of a missing one (it panics), so Open reads the
// framing of every segment but the last to find gaps, and names them.
// An empty WAL can only continue at the index it was emptied at: a lost WAL
// directory next to its snapshots is refused, not restarted at index 1.
//
// # Live operation
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
//
// Appends pause, failing with [ErrLowSpace] (a retriable [wal.ErrOverloaded]),
// while the WAL's filesystem has less free space than a snapshot of the
// index needs plus room for the WAL's next entries: a WAL that filled the
// disk would fence the log until a restart, while a paused store resumes
// by itself once space is back, and still has room for the snapshot whose
// retention may free it.
package recovery
