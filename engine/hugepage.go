package engine

import "unsafe"

// Large engine allocations (slab pages, shard tables, reverse maps, the
// loader's lists, a freeze's copy) are advised to the kernel as transparent
// huge page candidates before their first touch. On this project's VMs a
// fresh 4 KiB page costs about 3 ms a MiB to fault in, and a 10M
// holder-block index faults in close to 1 GB; 2 MiB pages cost a fraction of
// that (the 10M restart took ~8% less for this alone). The Go runtime no
// longer advises its heap itself, and on kernels set to "madvise" (the
// common default) nothing else would.
//
// The advice covers the 2 MiB-aligned range around the allocation: Go heap
// arenas are 64 MiB-aligned mappings, so that range is heap too, and a
// neighbouring allocation sharing it only gains. Memory freed later may stay
// resident in huge pages until the heap reuses it, which bounds it by the
// index's own peak.

// hugeAdviceMin is the smallest allocation worth a system call: one slab
// page.
const hugeAdviceMin = 32 << 10

// adviseHuge advises buf's backing array (all of its capacity) for huge
// pages. It is a hint: errors are ignored, and it does nothing off Linux.
func adviseHuge[T any](buf []T) {
	var zero T
	n := uintptr(cap(buf)) * unsafe.Sizeof(zero)
	if n < hugeAdviceMin {
		return
	}
	adviseHugeRange(uintptr(unsafe.Pointer(unsafe.SliceData(buf))), n)
}
