package engine

import "syscall"

const hugePageBytes = 2 << 20

func adviseHugeRange(p, n uintptr) {
	beg := p &^ (hugePageBytes - 1)
	end := (p + n + hugePageBytes - 1) &^ (hugePageBytes - 1)
	// A raw call: syscall.Madvise wants a []byte, and the rounded range is
	// not one Go allocation.
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, beg, end-beg, syscall.MADV_HUGEPAGE)
}

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14), missing from package syscall.
const madvPopulateWrite = 23

func populateRange(p, n uintptr) {
	beg := p &^ (4096 - 1)
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, beg, p+n-beg, madvPopulateWrite)
}
