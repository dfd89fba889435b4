package workload

import "runtime"

// heapInUse runs a full garbage collection (which also finishes sweeping) and
// returns the heap in use: runtime.MemStats.HeapInuse, the bytes of in-use
// heap spans, so fragmentation counts too.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// HeapMark is the heap in use after GC when a run passed a block-op count.
type HeapMark struct {
	// Target is the requested block-op count.
	Target int64
	// Reached tells whether the run got there; the fields below are zero if not.
	Reached bool
	// BlockOps is the block-op count when the heap was measured: the first
	// request boundary at or past Target.
	BlockOps int64
	// HeapBytes is the heap in use after GC at that point.
	HeapBytes uint64
}

// HeapGrowthPct returns the heap growth from the first to the last mark, in
// percent, and whether both marks were reached (and differ).
func HeapGrowthPct(marks []HeapMark) (float64, bool) {
	if len(marks) < 2 || !marks[0].Reached || !marks[len(marks)-1].Reached || marks[0].HeapBytes == 0 {
		return 0, false
	}
	first, last := float64(marks[0].HeapBytes), float64(marks[len(marks)-1].HeapBytes)
	return (last - first) / first * 100, true
}
