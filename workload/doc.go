// Package workload turns a Mooncake request trace into a realistic stream of
// KV-cache events and benchmarks the engine on it.
//
// A trace ([ReadTrace]) is one JSON object a line; each hash_id names one
// 512-token block and equal leading ids are a shared prefix. The workload is
// pinned so that figures compare across runs and tools:
//
//   - Records are replayed in trace order, records without blocks skipped. With
//     duplication K each record is emitted K times in a row; copy k uses block
//     ids id + k*(maxID+1) ([CopyID]), so copies never share blocks.
//   - A block's local hash is [TokensHash] (xxh3 of the id's 8 little-endian
//     bytes, seed [engine.Seed]); the router sequence chain is
//     [engine.SeqHashes] over them, and a worker's block hash is that sequence
//     hash, as Dynamo engines emit.
//   - W workers (ids 0..W-1, DP rank 0) each hold an LRU cache of C blocks.
//   - A request goes to the worker with the lowest cost = (request blocks -
//     the worker's [engine.Index.Match] score) + (blocks of the requests routed
//     to it among the last W requests); ties go to the lowest worker id.
//   - The chosen worker touches the request's blocks from last to first (the
//     first ends most recently used, so eviction takes chain tails first),
//     emits one Stored event per run of missing blocks in position order, then
//     one Removed event for the least recently used blocks beyond C, if any.
//   - Prefix hit rate = sum of the chosen workers' scores / sum of request blocks.
//
// [Generate] and [Run] produce the event stream grouped per request; the
// pieces they are built from ([Requests], [Simulator]) let a benchmark time the
// engine calls alone, as [Bench] does for `kvidx bench`.
package workload
