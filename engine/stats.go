package engine

import (
	"cmp"
	"slices"
)

// Score is how many leading blocks of a query one worker key holds.
type Score struct {
	Worker        WorkerKey
	MatchedBlocks int
}

// SortScores orders scores by MatchedBlocks descending, then worker id, then DP rank.
func SortScores(s []Score) {
	slices.SortFunc(s, func(a, b Score) int {
		if c := cmp.Compare(b.MatchedBlocks, a.MatchedBlocks); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Worker.WorkerID, b.Worker.WorkerID); c != 0 {
			return c
		}
		return cmp.Compare(a.Worker.DPRank, b.Worker.DPRank)
	})
}

// Counters count what the index has applied and skipped since it was created.
// They are part of the index state: snapshots keep them.
type Counters struct {
	EventsStored        uint64 `json:"events_stored"`
	EventsRemoved       uint64 `json:"events_removed"`
	EventsCleared       uint64 `json:"events_cleared"`
	EventsWorkerRemoved uint64 `json:"events_worker_removed"`
	BlocksStored        uint64 `json:"blocks_stored"`
	BlocksRemoved       uint64 `json:"blocks_removed"`
	ParentNotFound      uint64 `json:"parent_not_found"`
	InvalidSequence     uint64 `json:"invalid_sequence"`
	InvalidEvent        uint64 `json:"invalid_event"`
	TooManyWorkers      uint64 `json:"too_many_workers"`
	DuplicateStore      uint64 `json:"duplicate_store"`
	BlockNotFound       uint64 `json:"block_not_found"`
}

// Stats is the size of the index. Its JSON keys are shared by `kvidx replay
// --stats`, the server's /v1/stats and the inspection tools.
type Stats struct {
	Entries      int      `json:"entries"`
	HolderBlocks int      `json:"holder_blocks"`
	WorkerKeys   int      `json:"worker_keys"`
	Counters     Counters `json:"counters"`
}

// WorkerBlocks is the number of blocks (distinct block hashes) one worker key holds.
type WorkerBlocks struct {
	Worker WorkerKey
	Blocks int
}
