//go:build unix

package node

import "syscall"

// openFileLimit is the process's soft limit of open file descriptors, or 0
// when unknown. (Go raises it to the hard limit at start.)
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur)
}
