package workload

import (
	"encoding/binary"

	"github.com/kvidx/kvidx/engine"
	"github.com/zeebo/xxh3"
)

// TokensHash returns the local (tokens) hash of trace block id: xxh3-64 of the
// id's 8 little-endian bytes with seed [engine.Seed].
func TokensHash(id uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], id)
	return xxh3.HashSeed(b[:], engine.Seed)
}

// CopyID returns the block id that copy k (0-based) of a duplicated trace uses
// for trace block id: id + k*(maxID+1), maxID being the largest id of the
// whole trace. Copy 0 keeps the trace's ids.
func CopyID(id, maxID uint64, k int) uint64 {
	return id + uint64(k)*(maxID+1)
}
