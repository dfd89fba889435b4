// Package node is the HTTP face of `kvidx serve`: the JSON API over a durable
// index, its Prometheus metrics, periodic snapshots and the server's life
// cycle, plus a load generator that drives a running server over loopback.
//
// The server works against [Store], a small interface the durable store
// (package recovery) satisfies: an [engine.Index] to query, Append to log
// and apply a batch of events atomically, Snapshot, and WAL bookkeeping.
// [Server] is built before recovery finishes and reports "recovering" on
// /readyz until [Server.SetStore] hands it the store ([Server.SetStorePreparing]
// keeps it starting, ingest refused, until appends that must come first
// have landed); a write or fsync failure in the WAL fences it (ingest
// answers 503, queries keep working).
// A store that pauses appends on a nearly full disk gets 503s with
// Retry-After instead, and a snapshot (see spaceGuard).
//
// Endpoints (JSON bodies; every error is {"error":"..."} with a 4xx or 5xx):
//
//	POST   /v1/events               NDJSON or a JSON array of events (package eventjson); all or nothing
//	POST   /v1/match                {"local_hashes":[..]} or {"tokens":[..],"block_size":N,"lora_name":".."}
//	GET    /v1/workers              [{"worker_id":..,"dp_rank":..,"blocks":..}]
//	DELETE /v1/workers/{worker_id}  logs and applies a worker_removed event
//	GET    /v1/stats                engine.Stats plus WAL and snapshot bookkeeping
//	POST   /v1/snapshot             takes a snapshot now
//	GET    /healthz, /readyz        liveness, readiness (503 with the reason)
//	GET    /metrics                 Prometheus exposition
//
// Metrics live in a per-server registry ([Metrics]). Counters the engine
// already keeps are read from [engine.Index.Stats] at scrape time; WAL write
// and fsync timings come from a [wal.Store] wrapper ([NewWALInstrument]) the
// WAL is opened with, which can also inject write or fsync failures in tests.
//
// [Server] is an http.Handler; [Server.Run] serves it with fasthttp, which
// answers POST /v1/match and POST /v1/events itself (the hot routes; the
// handlers share their logic with the net/http ones) and passes every other
// request to the http.Handler. Run serves until its context is cancelled, triggering snapshots
// every N events or every interval when the index changed; on cancellation it
// ends the context of the event sources started with [Server.GoSource]
// (registered for readiness with [Server.AddSource]), stops accepting and
// drains in-flight requests while they stop, waits for the sources, and then
// takes a final snapshot, so that nothing is appended after it. The caller
// then closes the store.
//
// [LoadGen] replays a workload (package workload) against a server with a
// minimal HTTP/1.1 client: per request a match, its events then batched by
// an event poster; concurrent clients own disjoint sets of workers so each
// worker's events stay in order.
package node
