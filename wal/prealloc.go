package wal

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// The tail segment is preallocated: when Log's descriptor moves to a tail
// segment shorter than Options.SegmentSize, it writes zero bytes from the
// segment's end up to that size, and tidwall/wal's writes, made at its own
// file offset (the end of the entries), overwrite them in place. An fsync
// that only has to write data into blocks the file already has needs no
// journal commit for a new size and new blocks: on this project's VMs
// (ext4) a probe made 3,000–4,600 such fsyncs a second against 1,800–2,600
// appending ones, and BenchmarkAppend with 64 producers made 0.97–1.19M
// durable block ops/s against 0.63–0.73M in alternating runs (1.67–2.03M
// against 1.25–1.37M while the disk was quick; docs/performance.md).
//
// A segment is only ever extended up to Options.SegmentSize, and
// tidwall/wal moves to a new segment once the entries reach that size, so
// a segment other than the last never ends in zeros. The last one does
// while the log is open, and after a crash: a kvidx frame is never all
// zeros (tidwall/wal would read each zero byte as an empty entry), so the
// zero bytes after the last valid entry are unused space, not a torn
// tail. Open trims them quietly before tidwall/wal reads the segment,
// Close trims them, and every reader of the last segment leaves them out
// (see unusedTail). Zero bytes after a partial entry are part of a torn
// tail, cut and counted as before.

// extendTail writes zero bytes to f, the tail segment of size bytes, up to
// target bytes. It is an optimisation: a failure (a full disk) is logged
// and the log goes on without it; zeros it did write are unused space.
func extendTail(f *os.File, size, target int64, logger *slog.Logger) {
	if size >= target {
		return
	}
	if _, err := f.WriteAt(make([]byte, target-size), size); err != nil {
		logger.Warn("wal: could not preallocate the tail segment; appends make it grow",
			"segment", f.Name(), "size", size, "target", target, "err", err)
	}
}

// unusedTail returns how many bytes at the end of data, a last segment's
// contents, are unused preallocated space: the zero bytes after its longest
// prefix of complete valid entries, when nothing but zeros follows it.
func unusedTail(data []byte) int {
	good, _ := scanValid(data)
	rest := data[good:]
	if len(rest) == 0 || !allZero(rest) {
		return 0
	}
	return len(rest)
}

// inUse returns data, a last segment's contents, without its unused space.
func inUse(data []byte) []byte {
	return data[:len(data)-unusedTail(data)]
}

func allZero(b []byte) bool {
	var zeros [4096]byte
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// trimUnused cuts the unused space off the end of dir's last segment and
// fsyncs it, so that tidwall/wal (which would read each zero byte as an
// empty entry) and older kvidx versions see only entries. It changes
// nothing when the segment ends otherwise (a torn tail is repairTail's).
func trimUnused(dir string) error {
	segs, err := listSegments(dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", dir, err)
	}
	name := lastSegment(segs)
	if name == "" {
		return nil
	}
	path := filepath.Join(dir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("wal %s: segment %s: %w", dir, name, err)
	}
	unused := unusedTail(data)
	if unused == 0 {
		return nil
	}
	if err := truncateSync(path, int64(len(data)-unused)); err != nil {
		return fmt.Errorf("wal %s: segment %s: trim %d unused bytes: %w", dir, name, unused, err)
	}
	return nil
}
