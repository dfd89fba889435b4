package eventjson

import (
	"strconv"

	"github.com/kvidx/kvidx/engine"
)

// AppendResult appends the answer to a query of queryBlocks local hashes, on
// one line without a trailing newline, and returns the extended buffer:
//
//	{"scores":[{"worker_id":7,"dp_rank":0,"matched_blocks":3}],"query_blocks":5}
//
// Scores are written in the order given ([engine.Index.Match] sorts them);
// "scores" is an array even when scores is nil.
func AppendResult(dst []byte, scores []engine.Score, queryBlocks int) []byte {
	dst = append(dst, `{"scores":[`...)
	for i, sc := range scores {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"worker_id":`...)
		dst = strconv.AppendUint(dst, sc.Worker.WorkerID, 10)
		dst = append(dst, `,"dp_rank":`...)
		dst = strconv.AppendUint(dst, uint64(sc.Worker.DPRank), 10)
		dst = append(dst, `,"matched_blocks":`...)
		dst = strconv.AppendInt(dst, int64(sc.MatchedBlocks), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"query_blocks":`...)
	dst = strconv.AppendInt(dst, int64(queryBlocks), 10)
	return append(dst, '}')
}
