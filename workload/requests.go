package workload

import (
	"iter"
	"math"

	"github.com/kvidx/kvidx/engine"
)

// Request is one request of the workload: one copy of one trace record, hashed.
type Request struct {
	// Seq is the request's 0-based position in the workload's request stream.
	Seq int
	// Record is the index of its trace record in [Trace.Records].
	Record int
	// Copy is the duplicate copy k, 0..Duplicate-1.
	Copy int
	// TokensHashes holds the local hash of each block ([TokensHash] of its
	// [CopyID]): the query for [engine.Index.Match].
	TokensHashes []uint64
	// BlockHashes holds the router sequence hash of each block
	// ([engine.SeqHashes] of TokensHashes); workers use it as their block hash.
	BlockHashes []uint64
	// Worker and Matched are the routing decision: the chosen worker and its
	// index score. [Generate] and [Run] set them; [Requests] leaves them zero.
	Worker  engine.WorkerKey
	Matched int
}

// Blocks returns the request's block count.
func (r *Request) Blocks() int { return len(r.TokensHashes) }

// Requests yields the workload's requests in order: each record with blocks,
// duplicate times in a row. The yielded *Request and its slices are reused:
// they are valid until the next iteration step; copy what must outlive it.
// Config validation ([Config.Validate], done by [Run] and [Bench]) guarantees
// duplicated ids do not overflow; Requests itself does not check.
func Requests(tr *Trace, duplicate int) iter.Seq[*Request] {
	return func(yield func(*Request) bool) {
		maxID := tr.MaxID()
		req := &Request{}
		seq := 0
		for ri := range tr.Records {
			ids := tr.Records[ri].HashIDs
			if len(ids) == 0 {
				continue
			}
			for k := range duplicate {
				th := req.TokensHashes[:0]
				for _, id := range ids {
					th = append(th, TokensHash(CopyID(id, maxID, k)))
				}
				*req = Request{
					Seq:          seq,
					Record:       ri,
					Copy:         k,
					TokensHashes: th,
					BlockHashes:  engine.SeqHashes(req.BlockHashes[:0], th),
				}
				if !yield(req) {
					return
				}
				seq++
			}
		}
	}
}

// NumRequests returns how many requests [Requests] yields for tr.
func NumRequests(tr *Trace, duplicate int) int {
	n := 0
	for i := range tr.Records {
		if len(tr.Records[i].HashIDs) > 0 {
			n++
		}
	}
	return mulSat(n, duplicate)
}

// NumBlocks returns the blocks of the requests [Requests] yields: no index fed
// by the workload holds more holder-blocks than that.
func NumBlocks(tr *Trace, duplicate int) int {
	n := 0
	for i := range tr.Records {
		n += len(tr.Records[i].HashIDs)
	}
	return mulSat(n, duplicate)
}

// mulSat is n x k for n >= 0, 0 for k <= 0, and math.MaxInt where the
// product does not fit: a --duplicate of 2^62 wrapped the count negative,
// which panicked kvidx bench and let kvidx loadgen past its request limit.
func mulSat(n, k int) int {
	switch {
	case n <= 0 || k <= 0:
		return 0
	case n > math.MaxInt/k:
		return math.MaxInt
	}
	return n * k
}
