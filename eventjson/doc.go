// Package eventjson is kvidx's JSON wire format: it turns KV-cache events and
// prefix queries written as JSON into engine values, and engine values back into
// JSON.
//
// Events use the shape of NVIDIA Dynamo's RouterEvent, one JSON object per line
// (NDJSON):
//
//	{"worker_id":7,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":11,"blocks":[{"block_hash":12,"tokens_hash":102}]}}}}
//	{"worker_id":7,"event":{"event_id":2,"dp_rank":0,"data":{"removed":{"block_hashes":[12]}}}}
//	{"worker_id":7,"event":{"event_id":3,"dp_rank":0,"data":"cleared"}}
//	{"worker_id":7,"event":{"event_id":4,"dp_rank":0,"data":"worker_removed"}}
//
// The same decoder serves `kvidx replay` (files, pipes), the HTTP API (request
// bodies holding NDJSON or a JSON array, see [DecodeBatch]) and the WAL dump,
// whose extra "wal_index" key is ignored like every unknown field. Because the
// server must ingest hundreds of thousands of blocks per second through it, the
// decoder is hand-written: it reads numbers straight into []engine.Block and
// []uint64 without reflection or intermediate maps, and a [Decoder] reuses its
// buffers so a stream decodes without allocating per line. It is strict where
// strictness protects the index (numbers must be plain unsigned integers that
// fit their field, required fields must be present, the event kind must be
// known, nothing may follow the value) and lenient where it protects
// compatibility (unknown fields, absent or null optional fields). An event
// of another storage_tier than "device" or residency_domain than "worker"
// is refused ([ErrOtherTier]); a clear, which names no blocks, only for its
// residency_domain.
//
// [AppendEvent] writes the canonical one-line form, which [DecodeEvent] reads
// back to the same [engine.Event]. Queries ([DecodeQuery]) name a prefix by
// local block hashes or by token ids; results ([AppendResult]) list the worker
// keys holding it, best first.
//
// [LineReader] splits an NDJSON stream into lines, numbering them from 1, so
// that every error can name the line it came from.
package eventjson
