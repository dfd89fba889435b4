// Package ingest holds kvidx's ZMQ event source: it reads vLLM's (and
// SGLang's) KV-event publisher ([ZMQSource]). The NATS JetStream source is
// package ingest/jetstream.
//
// # Wire format
//
// A vLLM engine publishes on a PUB socket messages of three frames: a
// topic, an 8-byte big-endian batch sequence number, and a msgpack batch
// ([VLLMDecoder]): [ts, [events...], data_parallel_rank] or a map with
// those keys; events are BlockStored, BlockRemoved and AllBlocksCleared,
// tagged by class name as an array (tag first) or a map ("type" key).
// kvidx hashes each stored block's tokens itself (engine.LocalHashes with
// the LoRA salt of lora_name) and keeps the engine's hash as the block hash.
// Hashes may be unsigned or signed integers (bits kept) or bytes (the low 8,
// big-endian). SGLang's publisher is read too: its salted stores' metadata
// map in lora_name's place is skipped, and its EAGLE bigram token_ids
// ([t_i, t_i+1] pairs) are read as each pair's first token.
//
// # Exactly once, in order
//
// A source appends each batch to its [Store] together with the position
// wal.Position{Source: "zmq:<endpoint>", Seq: seq}, in one atomic Append,
// so after a restart [Store.Applied] names the last applied batch and the
// source asks the replay endpoint (a ROUTER; the source's DEALER sends
// ["", start as 8 bytes] and reads ["", seq, payload] or ["", topic, seq,
// payload] until seq -1) for everything after it (from 0 with no recorded
// position). Live batches:
//
//   - at or below the last applied sequence: duplicates, dropped, unless
//     (live) made after the batch applied last: each batch's ts is
//     recorded with its sequence, in microseconds, as position
//     "zmq:<endpoint>#ts", and a later one is a restarted engine's (kvidx
//     was away while it restarted): the worker is cleared and the new
//     engine's batches are replayed from 0 (without a replay endpoint,
//     the ones before are a gap); with a ts recorded, a replay asks from
//     the last sequence applied, so that a new engine already past it
//     sends a batch there made later;
//   - sequence 0 after higher ones: the engine restarted; the worker is
//     cleared (a Cleared event per DP rank the source has seen; other
//     sources may feed the worker id's other ranks) in the same Append as
//     the batch. The ranks seen are
//     recorded too, as positions "zmq:<endpoint>#dp<rank>" in the entry of
//     the first batch of each, so that a clear after a restart of kvidx
//     still forgets the ranks seen before it;
//   - past the next expected one: a replay from the next expected one; if
//     the batches are still missing (no replay endpoint, a failed replay,
//     or a replay that starts past the requested sequence because the
//     engine's buffer moved on) the worker is cleared before the batch:
//     its missed events are gone;
//   - undecodable: counted, the worker cleared (the ranks this source
//     fed), the position moved to it unless its sequence jumps ahead or
//     nothing was applied yet (a sequence may be as garbled as the
//     payload; a restart's sequence 0 is recorded);
//   - BlockStored token ids are hashed as any token list: full blocks
//     only, a trailing partial block dropped.
//
// A lost sequence 0 after an engine restart (the first batches published
// before the SUB reconnected) cannot be told from duplicates: the source
// drops batches until the engine's sequence passes the recorded one, then
// applies the new engine's batches on top of the old engine's blocks,
// which stay until a later restart, gap or undecodable batch clears the
// worker (vLLM's events carry no engine identity to tell them apart).
//
// # Bad input and connections
//
// Wrong frame counts, bad sequence frames, undecodable payloads, unknown
// event classes, lost batches, failed replays, dial failures and refused
// appends are counted per reason ([SourceStats].Errors, [ZMQOptions].OnError)
// and logged at most once per reason per interval; the source keeps
// running. It dials with its own exponential backoff and redials when the
// connection drops (a publisher restart), and reports Connected, LastSeq,
// HighestSeq and Lag for readiness and metrics.
//
// A peer that declares a ZMTP message (the sum of its frames, commands
// included) over 64 MiB, far above any vLLM batch, has its connection
// closed at that frame's header, before zmq4 would allocate the declared
// size: the failure counts as a dial failure (during the handshake) or a
// lost connection (after it), and the source redials with its backoff.
package ingest
