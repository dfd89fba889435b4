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

// A snapshot's size is about a·entries + b·holder-blocks (a place record,
// and a holder in it: a worker id, and the block hash unless it equals the
// router seq): 1 byte a holder-block where many workers hold the same
// blocks, about 31 where each block has one holder. Before this Store saw a
// snapshot, a holder-block is taken at maxSnapshotBytesPerHB, above both.
const maxSnapshotBytesPerHB = 44

// snapshotSize is the last snapshot written or loaded: its file's bytes,
// entries and holder-blocks.
type snapshotSize struct {
	bytes, entries, holderBlocks int64
}

// roomFor checks, before a snapshot of entries and holderBlocks is written,
// that the filesystem of the snapshot directory has room for it and,
// beyond it, for the WAL's next entries. The WAL shares the filesystem: a
// snapshot that fills it, if only until its temporary file is removed,
// makes the append that needs a block then fail, and a failed write fences
// the log, so that the node acknowledges nothing more until a restart. A
// filesystem whose free space cannot be read is not checked.
func (s *Store) roomFor(entries, holderBlocks int) error {
	free, err := s.freeSpace(s.snapDir)
	if err != nil {
		return nil
	}
	est := float64(holderBlocks) * maxSnapshotBytesPerHB
	if last := s.lastSize; last.entries > 0 && last.holderBlocks > 0 {
		// With size = a·entries + b·holder-blocks (a, b >= 0), the last
		// file's size scaled by the larger of the two growths bounds the
		// next one: a file of shared blocks says little of its entries'
		// cost, and a growth in entries must not pass for a small one.
		est = float64(last.bytes) * max(float64(entries)/float64(last.entries), float64(holderBlocks)/float64(last.holderBlocks))
	}
	segment, entry := int64(s.opts.SegmentSize), int64(s.opts.MaxEntryBytes)
	if segment <= 0 {
		segment = 512 << 10
	}
	if entry <= 0 {
		entry = 4 << 20
	}
	// A quarter over the estimate, a megabyte for bbolt's pages, and two
	// segments and an entry of WAL.
	need := int64(est*1.25) + 1<<20 + 2*segment + entry
	if free < need {
		return fmt.Errorf("data dir %s: a snapshot of %d holder-blocks was not written: it needs about %.1f MiB with room left for the WAL, and %.1f MiB are free on the filesystem of %s: %w",
			s.dir, holderBlocks, float64(need)/(1<<20), float64(free)/(1<<20), s.snapDir, ErrNoSpace)
	}
	return nil
}

// noteSnapshotSize records the size of a snapshot of entries and
// holderBlocks at path, for the next roomFor.
func (s *Store) noteSnapshotSize(path string, entries, holderBlocks int) {
	if fi, err := os.Stat(path); err == nil {
		s.lastSize = snapshotSize{bytes: fi.Size(), entries: int64(entries), holderBlocks: int64(holderBlocks)}
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
