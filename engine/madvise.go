package engine

import "unsafe"

// The snapshot loader advises the memory it builds (slab pages, shard
// tables, reverse maps) and its own lists to the kernel as transparent huge
// page candidates before first touching it. On this project's VMs a fresh
// 4 KiB page costs about 3 ms a MiB to fault in, and loading a 10M
// holder-block index faults in close to 1 GB: with huge pages the 10M
// restart took 2.3-3.6 s instead of 3.7-5.3 s in alternating runs. The Go
// runtime does not advise its heap, and kernels set to "madvise" (the usual
// default) would not use huge pages for it otherwise.
//
// Only the loader does it. The same VMs serve random reads and writes from
// huge pages more slowly than from 4 KiB pages (a freeze's Places pass took
// twice as long, the apply benchmark ~8% longer, a match's p50 ~15%; warm
// 10M snapshot writes with Places' scratch advised fell from 4.3M to 2.9M
// holder-blocks/s; a pointer-chasing probe, though, reads both alike, and
// the cause is not known), so the live index's own allocations and
// snapshot copies are not advised;
// they may still land in advised ranges when the heap reuses memory the
// loader freed. A loaded index keeps the loader's huge pages: a restart is
// rare, and its speed is what brings a router node back. The usual costs
// of THP apply to the advised ranges (a fault may wait for the kernel to
// compact memory; memory returned to the kernel may be merged back into
// huge pages), which is why the Go runtime stopped advising its heap
// (golang/go#61718); here they are bounded by the loader's allocations.

// The advice covers the 2 MiB-aligned range around the allocation: Go heap
// arenas are 64 MiB-aligned mappings, so the range is heap too.

// hugeAdviceMin is the smallest allocation worth a system call: one slab
// page.
const hugeAdviceMin = 32 << 10

// hugeAdvised advises buf's backing array (all of its capacity) for huge
// pages and returns buf. It is a hint: errors are ignored, and it does
// nothing off Linux.
func hugeAdvised[T any](buf []T) []T {
	if p, n := backing(buf); n >= hugeAdviceMin {
		adviseHugeRange(p, n)
	}
	return buf
}

// backing returns the address and size in bytes of buf's backing array,
// all of its capacity.
func backing[T any](buf []T) (p, n uintptr) {
	var zero T
	return uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(cap(buf)) * unsafe.Sizeof(zero)
}

// Other new memory that is filled at random is populated instead: one
// madvise(MADV_POPULATE_WRITE) maps the whole range, in 4 KiB pages. On
// this project's VMs that costs 0.2 ms a MiB, and the first access to each
// page still costs about 1.7 ms a MiB (the hypervisor maps it then),
// against 3.2 ms a MiB for faulting pages in one at a time. It is used for
// the tables and slab pages of a growing index (kvidx bench applied at
// 1.93-2.21M block ops/s with it, 1.79-1.95M without, alternating) and
// for Places' working memory, new on a process's first snapshot (the
// first 10M holder-block write ran at 3.8-4.0M holder-blocks/s with it,
// 2.7-3.2M without). PrepareFreeze populates the copy's new memory before
// touching it, so that the copy faults nothing in under the writer lock:
// a freeze of 1M holder-blocks in fresh memory took a median 33 ms with
// it, 45 ms without.

// populated faults all of buf's capacity in with one system call and
// returns buf. It is a hint: errors are ignored (MADV_POPULATE_WRITE needs
// Linux 5.14), and it does nothing off Linux.
func populated[T any](buf []T) []T {
	if p, n := backing(buf); n >= hugeAdviceMin {
		populateRange(p, n)
	}
	return buf
}
