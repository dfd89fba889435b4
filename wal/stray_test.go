package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bytes after the entries of a segment other than the last make
// tidwall/wal fail on every entry of it: when the entries are all the
// segment should hold (the next segment's name says so) and the bytes hold
// no valid entry, they are stray, the read-only walk says so on the gap,
// and RepairTrimStray removes them (a copy kept), making the log whole
// with every entry; otherwise they are not stray, and nothing is trimmed.
func TestTrimStray(t *testing.T) {
	cases := []struct {
		name  string
		spoil func(t *testing.T, seg, next []byte) []byte // the segment's new content
		stray bool
	}{
		{"one byte", func(t *testing.T, seg, _ []byte) []byte { return append(seg, 'x') }, true},
		{"fill bytes", func(t *testing.T, seg, _ []byte) []byte { return append(seg, bytes.Repeat([]byte{fillByte}, 7)...) }, true},
		{"an empty frame", func(t *testing.T, seg, _ []byte) []byte { return append(seg, 0) }, true},
		{"a torn copy of the next entry", func(t *testing.T, seg, next []byte) []byte {
			return append(seg, next[:entryEnds(t, next)[0]/2]...)
		}, true},
		{"a whole copy of the next entry", func(t *testing.T, seg, next []byte) []byte {
			return append(seg, next[:entryEnds(t, next)[0]]...)
		}, false},
		{"after a damaged entry", func(t *testing.T, seg, _ []byte) []byte {
			seg[entryEnds(t, seg)[0]-1] ^= 0x40
			return append(seg, 'x')
		}, false},
		{"an entry torn off its end", func(t *testing.T, seg, _ []byte) []byte {
			ends := entryEnds(t, seg)
			return seg[:ends[len(ends)-2]+2]
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, want := buildLog(t, 40, 300)
			segs, err := listSegments(dir)
			if err != nil || len(segs) < 4 {
				t.Fatalf("segments %v, %v: the test needs four", segs, err)
			}
			s, next := segs[1], segs[2]
			path := filepath.Join(dir, s.name)
			seg, _ := os.ReadFile(path)
			nextData, _ := os.ReadFile(filepath.Join(dir, next.name))
			spoilt := c.spoil(t, bytes.Clone(seg), nextData)
			if err := os.WriteFile(path, spoilt, 0o640); err != nil {
				t.Fatal(err)
			}
			lay, _ := Inspect(dir)
			var stray int64
			for _, g := range lay.Gaps {
				stray += g.Stray
			}
			backup := filepath.Join(t.TempDir(), "backup")
			trimmed, err := RepairTrimStray(dir, backup)
			if !c.stray {
				if stray != 0 || !errors.Is(err, ErrNothingToCut) {
					t.Fatalf("gaps %+v, repair %v: want no stray bytes and ErrNothingToCut", lay.Gaps, err)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, spoilt) {
					t.Fatal("the segment changed")
				}
				return
			}
			n := int64(len(spoilt) - len(seg))
			if stray != n {
				t.Fatalf("gaps %+v: stray bytes %d, want %d", lay.Gaps, stray, n)
			}
			if err != nil || len(trimmed) != 1 || trimmed[0] != (TrimmedSegment{Segment: s.name, Entries: next.index - s.index, Bytes: n}) {
				t.Fatalf("RepairTrimStray: %+v, %v", trimmed, err)
			}
			if got, _ := os.ReadFile(filepath.Join(backup, s.name)); !bytes.Equal(got, spoilt) {
				t.Fatal("the backup is not the segment as it was")
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, seg) {
				t.Fatal("the trimmed segment is not the segment as written")
			}
			if lay, err := Inspect(dir); err != nil || len(lay.Gaps)+len(lay.Damage) > 0 {
				t.Fatalf("after the repair: %v, gaps %v, damage %v", err, lay.Gaps, lay.Damage)
			}
			checkPrefix(t, dir, want, len(want)).Close()
		})
	}
}

// Bytes after the last segment's entries are a torn tail, which Open cuts
// itself: RepairTrimStray leaves them.
func TestTrimStrayLeavesTheTail(t *testing.T) {
	dir, _ := buildLog(t, 40, 300)
	f, err := os.OpenFile(tailPath(t, dir), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("xyz"))
	f.Close()
	if _, err := RepairTrimStray(dir, filepath.Join(t.TempDir(), "b")); !errors.Is(err, ErrNothingToCut) {
		t.Fatalf("RepairTrimStray with a torn tail only: %v, want ErrNothingToCut", err)
	}
}

// Zero bytes after a middle segment's entries (a filesystem's zeroed tail
// after a crash) frame an empty entry at every byte: the walk reports the
// run once, and the bytes are stray.
func TestZeroRunReportedOnce(t *testing.T) {
	dir, want := buildLog(t, 40, 300)
	segs, err := listSegments(dir)
	if err != nil || len(segs) < 4 {
		t.Fatalf("segments %v, %v: the test needs four", segs, err)
	}
	path := filepath.Join(dir, segs[1].name)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 4096))
	f.Close()
	lay, _ := Inspect(dir)
	if len(lay.Damage) != 1 || !strings.Contains(lay.Damage[0].Desc, "4096 zero bytes") {
		t.Fatalf("%d damage records, want one for the run: %v", len(lay.Damage), lay.Damage[:min(3, len(lay.Damage))])
	}
	if len(lay.Gaps) != 1 || lay.Gaps[0].Stray != 4096 {
		t.Fatalf("gaps %+v, want one of 4096 stray bytes", lay.Gaps)
	}
	if _, err := RepairTrimStray(dir, filepath.Join(t.TempDir(), "b")); err != nil {
		t.Fatal(err)
	}
	checkPrefix(t, dir, want, len(want)).Close()
}
