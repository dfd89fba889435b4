package wal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FindGaps, which recovery runs before a replay, finds the gaps Inspect
// (kvidx wal stat, recover --dry-run) reports, from the framing alone.
func TestFindGapsAgreesWithInspect(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string) // on threeSegmentLog: segments 1, 8 and 15
		want   []Gap
	}{
		{"whole log", func(*testing.T, string) {}, nil},
		{"middle segment gone", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "00000000000000000008")); err != nil {
				t.Fatal(err)
			}
		}, []Gap{{From: 8, To: 14, Keep: 7}}},
		{"first segment's last entry cut short", func(t *testing.T, dir string) {
			path := filepath.Join(dir, "00000000000000000001")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data[:len(data)-3], 0o640); err != nil {
				t.Fatal(err)
			}
		}, []Gap{{From: 1, To: 7, Keep: 6, Broken: true}}},
		{"stray bytes after the first segment's entries", func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, "00000000000000000001"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString("garbage"); err != nil {
				t.Fatal(err)
			}
		}, []Gap{{From: 1, To: 7, Keep: 7, Stray: 7, Broken: true}}},
	}
	// fields leaves out Desc, which names the files and says the same.
	fields := func(gaps []Gap) []Gap {
		var out []Gap
		for _, g := range gaps {
			g.Desc = ""
			out = append(out, g)
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := threeSegmentLog(t)
			tt.damage(t, dir)
			gaps, err := FindGaps(context.Background(), dir)
			if err != nil {
				t.Fatalf("FindGaps: %v", err)
			}
			if got := fields(gaps); !slices.Equal(got, tt.want) {
				t.Errorf("FindGaps %+v, want %+v", got, tt.want)
			}
			lay, err := Inspect(dir)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if !slices.Equal(gaps, lay.Gaps) {
				t.Errorf("FindGaps %+v, Inspect %+v", gaps, lay.Gaps)
			}
		})
	}
}

// FindGaps reads every segment but the last whole; it stops once its
// context is done.
func TestFindGapsCanceled(t *testing.T) {
	dir := threeSegmentLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := FindGaps(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("FindGaps with a canceled context: %v, want context.Canceled", err)
	}
}

// Segments lists the plain segment files by first index, and names the
// directory when it cannot be read.
func TestSegments(t *testing.T) {
	dir := threeSegmentLog(t)
	// What a crash during a truncation leaves, which Open finishes.
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000015.START"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	segs, err := Segments(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []SegmentFile{{"00000000000000000001", 1}, {"00000000000000000008", 8}, {"00000000000000000015", 15}}
	if !slices.Equal(segs, want) {
		t.Errorf("Segments %+v, want %+v", segs, want)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Segments(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Segments of a missing directory: %v, want os.ErrNotExist", err)
	}
}
