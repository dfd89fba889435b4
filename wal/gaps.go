package wal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// SegmentFile is one segment file of a log: its name, the 20-digit index
// of its first entry.
type SegmentFile struct {
	Name       string
	FirstIndex uint64
}

// Segments returns the plain segment files of the log in dir, by first
// index: not the .START or .END files of an interrupted truncation, which
// [Open] finishes before anything reads the log.
func Segments(dir string) ([]SegmentFile, error) {
	all, err := listSegments(dir)
	if err != nil {
		return nil, fmt.Errorf("wal %s: %w", dir, err)
	}
	var segs []SegmentFile
	for _, s := range all {
		if s.kind == "" {
			segs = append(segs, SegmentFile{Name: s.name, FirstIndex: s.index})
		}
	}
	return segs, nil
}

// String returns g's description.
func (g Gap) String() string { return g.Desc }

// FindGaps checks that every segment of the open log in dir but the last
// ends right where the next begins: tidwall/wal does not check it, and
// reading an entry of a missing segment makes it panic. It reads every
// non-tail segment's framing (not the entries' checksums: a replay checks
// those), where [Inspect] reads every entry.
//
// It reads every such segment whole: on a large WAL that takes seconds,
// and it returns ctx's error once ctx is done.
func FindGaps(ctx context.Context, dir string) ([]Gap, error) {
	segs, err := Segments(dir)
	if err != nil {
		return nil, err
	}
	var gaps []Gap
	for i := 0; i+1 < len(segs); i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, next := segs[i], segs[i+1]
		b, err := os.ReadFile(filepath.Join(dir, s.Name))
		if err != nil {
			return nil, fmt.Errorf("wal %s: %w", dir, err)
		}
		n, off, ok := Frames(b)
		end := s.FirstIndex + n // first index after the segment's entries
		var stray int64
		if !ok || end > next.FirstIndex {
			stray = StrayBytes(b, s.FirstIndex, next.FirstIndex)
		}
		switch {
		case !ok:
			// tidwall/wal reads a segment before the last whole, and a
			// break anywhere in it fails every one of its entries.
			gaps = append(gaps, Gap{From: s.FirstIndex, To: next.FirstIndex - 1, Keep: s.FirstIndex + min(n, ValidPrefix(b, s.FirstIndex)) - 1, Stray: stray, Broken: true,
				Desc: BrokenSegmentDesc(s.Name, off, len(b), n, s.FirstIndex, next.FirstIndex, stray)})
		case end < next.FirstIndex:
			gaps = append(gaps, Gap{From: end, To: next.FirstIndex - 1, Keep: end - 1,
				Desc: SegmentsGapDesc(s.Name, s.FirstIndex, end, next.Name, next.FirstIndex, 0)})
		case end > next.FirstIndex:
			gaps = append(gaps, Gap{From: next.FirstIndex, To: end - 1, Keep: next.FirstIndex - 1, Stray: stray,
				Desc: SegmentsGapDesc(s.Name, s.FirstIndex, end, next.Name, next.FirstIndex, stray)})
		}
	}
	return gaps, nil
}
