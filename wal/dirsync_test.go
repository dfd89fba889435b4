package wal

// The directory is fsynced after every change of its segment files that
// tidwall/wal makes and never fsyncs (see the top of log.go). Nothing
// outside shows a directory fsync, so the tests wrap Options.dirSync and
// record the segment files each fsync covered.

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// dirSyncs records the segment files, with their sizes, that each directory
// fsync covered.
type dirSyncs struct {
	mu   sync.Mutex
	seen []map[string]int64
}

func (r *dirSyncs) sync(dir string) error {
	segs, err := listSegments(dir)
	if err != nil {
		return err
	}
	files := map[string]int64{}
	for _, s := range segs {
		fi, err := os.Stat(filepath.Join(dir, s.name))
		if err != nil {
			return err
		}
		files[s.name] = fi.Size()
	}
	r.mu.Lock()
	r.seen = append(r.seen, files)
	r.mu.Unlock()
	return syncDir(dir)
}

// since returns what the fsyncs from the nth on covered.
func (r *dirSyncs) since(n int) []map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[n:]
}

func (r *dirSyncs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// Open (a new segment, a torn tail cut), a segment rollover and
// TruncateFront each fsync the directory once the segment files are as
// they leave them: removing one of the fsyncs fails its case (the torn
// tail's fsync in repairTail is followed by Open's own, so only removing
// both fails that case).
func TestDirectorySynced(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before prepares the directory (no log open on it) and returns
		// the size the last segment must have at the fsync, or -1 (any).
		before func(t *testing.T, dir string) int64
		// step, if set, changes the directory through the log; without
		// one, the step is Open itself.
		step func(t *testing.T, l *Log)
	}{
		{name: "open creates the first segment",
			before: func(*testing.T, string) int64 { return -1 }},
		{name: "open cuts a torn tail",
			before: func(t *testing.T, dir string) int64 {
				o := quietOpts()
				o.SegmentSize = 256
				l := mustOpen(t, dir, o)
				appendN(t, l, 1, 3)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				tail := tailPath(t, dir)
				size := fileSize(t, tail)
				f, err := os.OpenFile(tail, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, err = f.Write([]byte{0x40, 0x01, 0x02, 0x03}) // a partial frame
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatal(err)
				}
				return size
			}},
		{name: "segment rollover",
			before: func(*testing.T, string) int64 { return -1 },
			step: func(t *testing.T, l *Log) {
				n := len(segsOf(t, l.Dir()))
				for i := 1; len(segsOf(t, l.Dir())) == n; i++ {
					if i > 100 {
						t.Fatal("no rollover after 100 entries")
					}
					appendN(t, l, i, i)
				}
			}},
		{name: "truncate front",
			before: func(t *testing.T, dir string) int64 { segmentedLog(t, dir, 30); return -1 },
			step: func(t *testing.T, l *Log) {
				segs, err := listSegments(l.Dir())
				if err != nil {
					t.Fatal(err)
				}
				// Inside the third segment: the two before it go, and
				// tidwall/wal rewrites the third from the new first entry.
				if err := l.TruncateFront(segs[2].index + 1); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tailSize := tc.before(t, dir)
			rec := &dirSyncs{}
			o := quietOpts()
			o.SegmentSize = 256
			o.dirSync = rec.sync
			l := mustOpen(t, dir, o)
			defer l.Close()
			from := 0
			if tc.step != nil {
				from = rec.count()
				tc.step(t, l)
			}
			want := slices.Sorted(slices.Values(segsOf(t, dir)))
			tail := want[len(want)-1]
			for _, seen := range rec.since(from) {
				if slices.Equal(slices.Sorted(maps.Keys(seen)), want) && (tailSize < 0 || seen[tail] == tailSize) {
					return
				}
			}
			t.Errorf("no directory fsync covered the segment files as the step left them: %v (tail %s of %d bytes, -1: any); the fsyncs covered %v",
				want, tail, tailSize, rec.since(from))
		})
	}
}
