package recovery

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNoSpace: a snapshot was not written because the filesystem lacks room
// for it and for the WAL to go on.
var ErrNoSpace = errors.New("not enough free space for a snapshot")

// A snapshot's size before this Store saw one: the bound for the
// format (files measure 16-18 bytes a holder-block on the benchmark
// workload).
const defaultSnapshotBytesPerHB = 24

// roomFor checks, before a snapshot of holderBlocks is written, that the
// filesystem of the snapshot directory has room for it and, beyond it, for
// the WAL's next entries. The WAL shares the filesystem: a snapshot that
// fills it, if only until its temporary file is removed, makes the append
// that needs a block then fail, and a failed write fences the log, so that
// the node acknowledges nothing more until a restart. A filesystem whose
// free space cannot be read is not checked.
func (s *Store) roomFor(holderBlocks int) error {
	free, err := s.freeSpace(s.snapDir)
	if err != nil {
		return nil
	}
	perHB := s.snapBytesPerHB
	if perHB <= 0 {
		perHB = defaultSnapshotBytesPerHB
	}
	segment, entry := int64(s.opts.SegmentSize), int64(s.opts.MaxEntryBytes)
	if segment <= 0 {
		segment = 512 << 10
	}
	if entry <= 0 {
		entry = 4 << 20
	}
	// A quarter over the last file's rate (the index's shape changes), a
	// megabyte for bbolt's pages, and two segments and an entry of WAL.
	need := int64(float64(holderBlocks)*perHB*1.25) + 1<<20 + 2*segment + entry
	if free < need {
		return fmt.Errorf("data dir %s: a snapshot of %d holder-blocks was not written: it needs about %d MiB with room left for the WAL, and %d MiB are free on the filesystem of %s: %w",
			s.dir, holderBlocks, need>>20, free>>20, s.snapDir, ErrNoSpace)
	}
	return nil
}

// noteSnapshotSize records the size of a snapshot of holderBlocks at path,
// for the next roomFor.
func (s *Store) noteSnapshotSize(path string, holderBlocks int) {
	if fi, err := os.Stat(path); err == nil && holderBlocks > 0 {
		s.snapBytesPerHB = float64(fi.Size()) / float64(holderBlocks)
	}
}

// freeBytes returns the bytes an unprivileged writer may still use on the
// filesystem holding dir.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), nil
}
