package node

import (
	"time"

	"github.com/kvidx/kvidx/engine"
)

// statsJSON is the body of GET /v1/stats: the keys of [engine.Stats] plus
// the WAL's range and the last snapshot.
type statsJSON struct {
	Entries       int             `json:"entries"`
	HolderBlocks  int             `json:"holder_blocks"`
	WorkerKeys    int             `json:"worker_keys"`
	Counters      engine.Counters `json:"counters"`
	WALFirstIndex uint64          `json:"wal_first_index"`
	WALLastIndex  uint64          `json:"wal_last_index"`
	AppliedIndex  uint64          `json:"applied_index"`
	WALFenced     bool            `json:"wal_fenced"`
	// IngestPaused: appends pause while the data directory's filesystem
	// has less than DiskFloorBytes free (DiskFreeBytes, as last read; both
	// 0 when the store does not check).
	IngestPaused      bool       `json:"ingest_paused_low_space"`
	DiskFreeBytes     int64      `json:"disk_free_bytes"`
	DiskFloorBytes    int64      `json:"disk_floor_bytes"`
	SnapshotLastIndex uint64     `json:"snapshot_last_index"`
	SnapshotLastTime  *time.Time `json:"snapshot_last_time"` // null before the first snapshot
}
