package wal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// The tail segment is preallocated: when Log's descriptor moves to a new
// tail segment shorter than Options.SegmentSize, it fills the segment from
// its end up to that size with fillByte, and tidwall/wal's writes, made at
// its own file offset (the end of the entries), overwrite the fill in place.
// An fsync that only has to write data into blocks the file already has
// needs no journal commit for a new size and new blocks: on this project's
// VMs (ext4) a probe made 3,000–4,600 such fsyncs a second against
// 1,800–2,600 appending ones, and BenchmarkAppend with 64 producers made
// 0.97–1.19M durable block ops/s against 0.63–0.73M in alternating runs
// (1.67–2.03M against 1.25–1.37M while the disk was quick;
// docs/performance.md).
//
// A segment is only ever filled up to Options.SegmentSize, and tidwall/wal
// moves to a new segment once the entries reach that size, so a segment
// other than the last never ends in fill. The last one does while the log
// is open, and after a crash. Fill that follows the entries, up to the end
// of the segment, is unused space: Open trims it quietly before tidwall/wal
// reads the segment (it would fail on it), Close trims it, and every reader
// of the last segment leaves it out (see unusedTail; the read-only walk
// reports it as [Layout].UnusedBytes). Anything else after
// the entries is a torn tail, cut, logged and counted as before: zeros
// included (a lost write, not the writer's fill).
//
// Overwriting in place has one consequence appending had not: after a power
// loss (not a process crash, which leaves the page cache to the kernel), a
// page of the segment may have kept its older contents while a later page
// holds newer entries; with appends, ext4's ordered mode left no such hole.
// Nothing after a hole was acknowledged under SyncAlways (the fsync
// acknowledging an entry writes every page before it), but Open does not
// cut it as a torn tail: a page that a failed fsync left stale in the page
// cache (Linux marks it clean) is a hole under entries acknowledged after a
// restart, and only a reboot shows it. Valid entries after the break are
// refused as damage, naming the repair that cuts them; an operator decides.
// A reader racing the writer can see such a hole too, which the writer then
// fills: the read-only walk reads again before it reports damage.

// fillByte makes up the unused space. Not zero, so that entries zeroed by a
// lost write stay a torn tail; at least 0x80, so that it never reads as an
// entry's length (a run of it overflows a uvarint); and it cannot complete
// the frame of a torn entry: the CRC-32C of no run of fill up to 16 MiB is
// four fill bytes (0xFF would not do: the CRC-32C of four 0xFF bytes is
// 0xFFFFFFFF; TestFillCompletesNoFrame).
const fillByte = 0xA5

// extendTail fills f, the tail segment of size bytes, up to the segment
// size. It is an optimisation: a failure (a full disk) is logged and the
// log goes on without it; fill it did write is unused space. Called with
// fdMu held or before the goroutines start (l.fill is reused: a segment's
// worth of garbage at every rollover would be new memory each time).
func (l *Log) extendTail(f *os.File, size int64) {
	target := int64(l.opts.SegmentSize)
	if size >= target {
		return
	}
	if len(l.fill) < int(target-size) {
		l.fill = bytes.Repeat([]byte{fillByte}, l.opts.SegmentSize)
	}
	if _, err := f.WriteAt(l.fill[:target-size], size); err != nil {
		l.logger.Warn("wal: could not preallocate the tail segment; appends make it grow",
			"segment", f.Name(), "size", size, "target", target, "err", err)
	}
}

// fillRun returns how many fill bytes b starts with.
func fillRun(b []byte) int {
	n := 0
	for n < len(b) && b[n] == fillByte {
		n++
	}
	return n
}

// unusedTail returns how many bytes at the end of data, a last segment's
// contents, are unused space: fill from a boundary of its framing to the
// end. The entries before it need not be valid (damage is judged on the
// rest), but a framing that breaks before the fill makes it part of a torn
// tail.
func unusedTail(data []byte) int {
	for off := 0; off < len(data); {
		if fillRun(data[off:]) == len(data)-off {
			return len(data) - off
		}
		_, n, ok := nextEntry(data[off:])
		if !ok {
			return 0
		}
		off += n
	}
	return 0
}

// inUse returns data, a last segment's contents, without its unused space.
func inUse(data []byte) []byte {
	return data[:len(data)-unusedTail(data)]
}

// trimUnused cuts the unused space off the end of dir's last segment and
// fsyncs it, so that tidwall/wal and older kvidx versions see only entries.
// It changes nothing when the segment ends otherwise (a torn tail is
// repairTail's).
func trimUnused(dir string) error {
	name, _, data, err := readLastSegment(dir)
	if err != nil || name == "" {
		return err
	}
	unused := unusedTail(data)
	if unused == 0 {
		return nil
	}
	if err := truncateSync(filepath.Join(dir, name), int64(len(data)-unused)); err != nil {
		return fmt.Errorf("wal %s: segment %s: trim %d unused bytes: %w", dir, name, unused, err)
	}
	return nil
}
