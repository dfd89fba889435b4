package recovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/kvidx/kvidx/wal"
)

// segment is one tidwall/wal segment file: its first index and size.
type segment struct {
	name  string
	index uint64
}

// listSegments returns the WAL's plain segment files (tidwall/wal has
// finished any interrupted truncation by the time the log is open), by
// first index.
func listSegments(dir string) ([]segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal %s: %w", dir, err)
	}
	var segs []segment
	for _, e := range ents {
		name := e.Name()
		if len(name) != 20 || e.IsDir() {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 64)
		if err != nil || n == 0 {
			continue
		}
		segs = append(segs, segment{name: name, index: n})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].index < segs[j].index })
	return segs, nil
}

// findGaps checks that every segment but the last ends right where the
// next begins: tidwall/wal does not check it, and reading an entry of a
// missing segment makes it panic. It reads every non-tail segment's
// framing (not the entries' checksums: replay checks those).
//
// It reads every such segment whole: on a large WAL that takes seconds,
// and it returns ctx's error once ctx is done.
func findGaps(ctx context.Context, dir string) ([]Span, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	var gaps []Span
	for i := 0; i+1 < len(segs); i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, next := segs[i], segs[i+1]
		b, err := os.ReadFile(filepath.Join(dir, s.name))
		if err != nil {
			return nil, fmt.Errorf("wal %s: %w", dir, err)
		}
		n, off, ok := wal.Frames(b)
		end := s.index + n // first index after the segment's entries
		var stray int64
		if !ok || end > next.index {
			stray = wal.StrayBytes(b, s.index, next.index)
		}
		switch {
		case !ok:
			// tidwall/wal reads a segment before the last whole, and a
			// break anywhere in it fails every one of its entries.
			gaps = append(gaps, Span{From: s.index, To: next.index - 1, Keep: s.index + min(n, wal.ValidPrefix(b, s.index)) - 1, Stray: stray, Broken: true,
				Desc: wal.BrokenSegmentDesc(s.name, off, len(b), n, s.index, next.index, stray)})
		case end < next.index:
			gaps = append(gaps, Span{From: end, To: next.index - 1, Keep: end - 1,
				Desc: wal.SegmentsGapDesc(s.name, s.index, end, next.name, next.index, 0)})
		case end > next.index:
			gaps = append(gaps, Span{From: next.index, To: end - 1, Keep: next.index - 1, Stray: stray,
				Desc: wal.SegmentsGapDesc(s.name, s.index, end, next.name, next.index, stray)})
		}
	}
	return gaps, nil
}
