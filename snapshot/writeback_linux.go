//go:build linux && (amd64 || arm64)

package snapshot

import (
	"os"
	"syscall"
)

// openWriteback opens the file at path for startWriteback, or returns nil.
func openWriteback(path string) *os.File {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	return f
}

// startWriteback asks the kernel to start writing f's dirty pages to disk
// and returns at once (sync_file_range with SYNC_FILE_RANGE_WRITE). It is a
// hint: the final fsync is what makes the file durable, and errors are
// ignored.
func startWriteback(f *os.File) {
	const syncFileRangeWrite = 2
	_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, f.Fd(), 0, 0, syncFileRangeWrite, 0, 0)
}
