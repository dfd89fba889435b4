// Package engine is kvidx's in-memory positional index of KV-cache blocks.
//
// Inference workers publish KV-cache events: blocks stored after a parent block,
// blocks removed, all blocks cleared, a worker gone. The engine applies those
// events, in order, to a sharded map keyed by (position, local block hash). Each
// entry groups its holders by a router sequence hash that the engine computes
// itself (see [NextSeq]), so the same block after two different prefixes is
// never confused. A per-worker reverse map from the engine's own block hash to
// its place lets Removed events find their entries.
//
// The property that sets kvidx apart: when the last holder leaves an entry, the
// entry is deleted under the same shard lock that emptied it, on every removal
// path, so the index never keeps empty entries and its memory stays flat under
// cache churn.
//
// Queries ([Index.Match]) score, per worker, how many leading blocks of a request
// it holds, exactly: a block missing in the middle of a chain stops the score
// there. Workers whose held blocks all have their parents held (no holes) are
// scored by bisection over positions; only workers with holes are checked
// position by position.
//
// Snapshots: [Index.Freeze] copies the state between two events (writers
// wait only for the copy; queries never wait), [Frozen.Places] yields it as
// place records in position order, and a [Loader] builds a new index from
// such records in bulk, recomputing which workers are hole-free.
//
// Memory follows the index down after a peak: places live in paged slabs
// referred to by number, and when an eighth of a shard's place slots (and at
// least a page of them) are free the writer compacts them and rewrites every
// reference.
//
// [Index.Reserve] sizes an index for the holder-blocks and worker keys it is
// expected to hold, before events flow: while it fills, its tables then
// mostly neither resize nor map fresh memory, and they do not shrink below
// that size.
//
// An index that grows without a reservation has the memory of its next
// growths (bigger tables, slab pages) made and faulted in ahead on another
// goroutine, which runs only while there is such work (see grower).
//
// The package does no I/O: the write-ahead log, snapshots and event decoders
// live in other packages and feed [Event] values to [Index.Apply].
package engine
