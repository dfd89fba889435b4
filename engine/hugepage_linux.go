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
