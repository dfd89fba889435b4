package wal

import (
	"fmt"
	"os"
	"path/filepath"
)

// Stray bytes are bytes after the entries of a segment other than the
// last, when those entries are every one the segment should hold: the next
// segment's name says which entry comes next, so the bytes after them are
// no entry of the log (a disk or a tool wrote them). tidwall/wal reads such
// a segment whole and fails on every entry of it, so the log has a gap
// there (see Gap) that a cut after the entries before it would only move:
// removing the stray bytes makes the segment, and the log, whole again,
// and loses nothing.

// StrayBytes returns how many stray bytes end data, the segment whose first
// entry is first, when the segment after it starts at next: its first
// next-first entries are whole and valid, and what follows them is not a
// valid entry, nor holds one (a copy of an entry is not taken for junk).
// It returns 0 when the segment is not so (no bytes follow its entries,
// or an entry it should hold is missing or damaged).
func StrayBytes(data []byte, first, next uint64) int64 {
	if next <= first {
		return 0
	}
	end, n := scanValid(data, first)
	if uint64(n) != next-first || end == len(data) || validAtOrAfter(data, end) >= 0 {
		return 0
	}
	return int64(len(data) - end)
}

// StrayNote is what a gap's description adds when n stray bytes close it
// ("" for 0).
func StrayNote(n int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("; only %d stray byte(s) after entries the segment holds whole make it so: kvidx wal repair --trim-stray removes them, losing nothing", n)
}

// TrimmedSegment is a segment whose stray bytes [RepairTrimStray] removed.
type TrimmedSegment struct {
	Segment string
	Entries uint64 // the entries it holds, all kept
	Bytes   int64  // the stray bytes removed
}

// RepairTrimStray removes the stray bytes (see StrayBytes) that end any
// segment of the log in dir other than the last, after copying each
// segment it changes into backupDir (as [RepairTruncateAfter] does: never
// overwriting an earlier backup). It keeps every entry. It takes the
// directory lock, so no Log may have dir open, and returns
// [ErrNothingToCut] when no segment ends in stray bytes.
func RepairTrimStray(dir, backupDir string) (trimmed []TrimmedSegment, err error) {
	lock, segs, err := lockForRepair(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if uerr := lock.Unlock(); err == nil {
			err = uerr
		}
	}()
	var (
		change []segFile
		keep   []int64 // the bytes of each that stay
	)
	for i := 0; i+1 < len(segs); i++ {
		s := segs[i]
		data, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			return nil, fmt.Errorf("wal %s: segment %s: %w", dir, s.name, err)
		}
		if n := StrayBytes(data, s.index, segs[i+1].index); n > 0 {
			change, keep = append(change, s), append(keep, int64(len(data))-n)
			trimmed = append(trimmed, TrimmedSegment{Segment: s.name, Entries: segs[i+1].index - s.index, Bytes: n})
		}
	}
	if len(change) == 0 {
		return nil, fmt.Errorf("wal %s: no segment ends in stray bytes after its entries: %w", dir, ErrNothingToCut)
	}
	if err := backupSegments(dir, backupDir, change); err != nil {
		return nil, err
	}
	for i, s := range change {
		if err := truncateSync(filepath.Join(dir, s.name), keep[i]); err != nil {
			return nil, fmt.Errorf("wal %s: segment %s: trim %d stray bytes: %w", dir, s.name, trimmed[i].Bytes, err)
		}
	}
	return trimmed, syncDir(dir)
}

// SegmentsGapDesc describes the entries between segment prev, whose
// entries run prevFirst..end-1, and the next segment next, which starts at
// nextFirst != end: missing (end < nextFirst) or held twice (an overlap;
// stray is the previous segment's stray bytes, see [StrayBytes]).
// [Inspect] and recovery describe a gap alike with it.
func SegmentsGapDesc(prev string, prevFirst, end uint64, next string, nextFirst uint64, stray int64) string {
	if end < nextFirst {
		return fmt.Sprintf("gap: segment %s holds entries %d..%d but the next segment %s starts at %d: entries %d..%d are missing",
			prev, prevFirst, end-1, next, nextFirst, end, nextFirst-1)
	}
	return fmt.Sprintf("overlap: segment %s holds entries %d..%d but the next segment %s starts at %d%s",
		prev, prevFirst, end-1, next, nextFirst, StrayNote(stray))
}

// BrokenSegmentDesc describes segment name, first..next-1, whose
// tidwall/wal framing breaks at byte off of size after whole entries (see
// [Frames]): tidwall/wal reads a segment other than the last whole, so
// none of its entries can be read. [Inspect] and recovery describe such a
// segment alike with it.
func BrokenSegmentDesc(name string, off, size int, whole, first, next uint64, stray int64) string {
	return fmt.Sprintf("segment %s: framing breaks at byte %d of %d after %d whole entries: entries %d..%d unreadable (tidwall/wal reads a segment whole)%s",
		name, off, size, whole, first, next-1, StrayNote(stray))
}
