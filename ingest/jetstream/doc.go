// Package jetstream feeds a kvidx store from a NATS JetStream stream, so that
// a fleet of router replicas shares one durable stream of KV-cache events.
//
// Each message holds events in kvidx's JSON shape (one event, an NDJSON
// batch, or a JSON array; see package eventjson). Each replica reads the
// stream with its own ordered consumer (never a shared durable one), starting
// at the stream sequence after the last one recorded in its own store: the
// position travels in the same WAL entry as the message's events, so a
// message counts as applied exactly when that entry is durable, and after a
// crash the replica resumes with the next message, none applied twice, none
// skipped.
//
// If that next sequence is no longer in the stream (expired or purged), the
// source does not skip silently: it reports the gap (not ready) and waits,
// unless it was configured to allow gaps, in which case it logs the gap and
// continues from the stream's first message. The same holds for messages
// removed while the source runs behind them: the consumer jumps over them,
// and the source reports the gap, applying nothing after it, unless allowed.
// A replica whose subject filter is narrower than the stream's subjects
// (other sources' events share the stream) only counts as a gap what may
// have held its own messages: when it is idle and a fetch confirms that
// every message of its subject up to the stream's last sequence was
// delivered, it records that sequence as its position (a WAL entry without
// events), so that other subjects' messages trimmed after it are no gap.
// What such a replica cannot see is its own subject's messages removed from
// the middle of the stream (a per-subject limit, a purge by subject, a
// delete): a removed message leaves no trace of its subject, so those go
// unreported, and the source warns at start that its filter is narrower
// than the stream. A stream of kvidx's events alone has no such blind spot.
//
// A stream deleted and recreated numbers its messages from 1 again; the
// source tells it by the stream's creation time, recorded with the position
// (and, in logs written before that, by a stream that ends before the
// position), and treats it as a gap too: allowed, it records the new
// stream's start as its position in a WAL entry of its own, then applies the
// new stream from its first message.
//
// Messages that do not decode are counted and logged (rate-limited), and
// their position is still recorded, so they are not read again.
package jetstream
