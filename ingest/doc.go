// Package ingest holds kvidx's ZMQ event source: it reads vLLM's (and
// SGLang's) KV-event publisher ([ZMQSource]). The NATS JetStream source is
// package ingest/jetstream.
//
// It composes lower layers and owns none: it decodes engine events,
// appends them to a durable [Store] (recovery.Store satisfies it) with the
// source's position, and leaves logging, applying and snapshots to that
// store; `kvidx serve --zmq` starts one source per flag value.
//
// Entry points: [ParseZMQSpec] reads a --zmq value into a [ZMQSpec];
// [NewZMQSource] and [ZMQSource.Run] follow one publisher until the context
// ends; [ZMQSource.Stats] reports connection, sequence and lag for readiness
// and metrics; [VLLMDecoder] turns one msgpack batch into engine events
// (see the top of vllm.go for the wire format, and README's "vLLM engines
// over ZMQ" for what an operator sees).
//
// Guarantees (details, per case, at the top of zmq.go):
//
//   - Exactly once, in order: each batch is appended in one atomic Append
//     together with its position "zmq:<endpoint>", so a restart of kvidx
//     resumes after the last applied batch and never applies one twice.
//   - Missed batches are asked of the engine's replay endpoint; when they
//     are gone, the worker is cleared before the next batch is applied, so
//     that removals it missed cannot leave blocks held.
//   - An engine restart (sequence 0 again, or a later ts at a sequence
//     already applied) clears the worker's ranks this source fed, never
//     the worker id's other ranks (but the first clear after an upgrade
//     from a WAL that recorded no rank removes the worker id).
//   - A restart of kvidx that gives an endpoint another worker id clears
//     what the endpoint fed the old id ([ReconcileZMQ], before any source
//     applies anything; the old id goes whole when the WAL recorded no
//     rank); the new id starts from nothing.
//   - An endpoint the store records that no source follows any more
//     (removed from the configuration, or spelled otherwise) clears the
//     ranks it fed its recorded worker id and is forgotten
//     ([ForgetRemovedZMQ], also before any source applies anything); one
//     from before the worker id was recorded is only warned about.
//   - Neither clear touches a (worker id, DP rank) that a configured
//     endpoint fed too and still feeds (the index cannot tell whose blocks
//     are whose; see stillFed in zmq_reconcile.go).
//   - Bad input never stops a source: each kind is counted per reason
//     ([SourceStats].Errors) and logged at most once per interval, and a
//     batch that does not decode clears the worker.
//   - A dropped connection is redialled with backoff; a peer that declares
//     a message over 64 MiB is disconnected before zmq4 allocates it.
//
// Known limits (see zmq.go): an engine whose batches carry no ts is seen to
// restart only at a live sequence 0, so with that batch lost its later
// batches are dropped as duplicates and the old engine's blocks stay until
// a later clear; and a new engine whose first batch the source sees is the
// one after the last applied (kvidx away without a replay endpoint, or a
// reconnect that missed its earlier batches) passes for the old one
// continuing.
package ingest
