package wal

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func scanAll(t *testing.T, dir string, from, to uint64) ([]Entry, Layout, error) {
	t.Helper()
	var got []Entry
	lay, err := Scan(dir, from, to, func(e Entry) error {
		got = append(got, e)
		return nil
	})
	return got, lay, err
}

func TestScanMatchesLog(t *testing.T) {
	dir, want := buildLog(t, 40, 1024)
	before := dirFiles(t, dir)
	got, lay, err := scanAll(t, dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(lay.Segments) < 2 || lay.FirstIndex != 1 || lay.LastIndex != 40 || lay.TornBytes != 0 {
		t.Fatalf("layout %+v", lay)
	}
	if len(got) != 40 {
		t.Fatalf("%d entries", len(got))
	}
	for i, e := range got {
		if e.Index != uint64(i+1) || !reflect.DeepEqual(e.Events, want[i]) {
			t.Fatalf("entry %d: %+v, want %+v", i+1, e, want[i])
		}
	}
	if lay.DecodedBytes == 0 || lay.FramedBytes == 0 {
		t.Fatalf("sizes %+v", lay)
	}
	got, _, err = scanAll(t, dir, 10, 12)
	if err != nil || len(got) != 3 || got[0].Index != 10 {
		t.Fatalf("range 10..12: %d entries, %v", len(got), err)
	}
	if !reflect.DeepEqual(before, dirFiles(t, dir)) {
		t.Fatal("Scan changed the directory")
	}
}

func TestScanTornTailNotCut(t *testing.T) {
	dir, _ := buildLog(t, 10, 1<<20)
	tail := tailPath(t, dir)
	f, err := os.OpenFile(tail, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{50, 1, 2, 3})
	f.Close()
	before := dirFiles(t, dir)
	got, lay, err := scanAll(t, dir, 0, 0)
	if err != nil || len(got) != 10 {
		t.Fatalf("%d entries, %v", len(got), err)
	}
	if lay.TornBytes != 4 || lay.LastIndex != 10 || lay.TornSegment != filepath.Base(tail) {
		t.Fatalf("layout %+v", lay)
	}
	if !reflect.DeepEqual(before, dirFiles(t, dir)) {
		t.Fatal("Scan changed the directory")
	}
	// Open would cut exactly that.
	l := mustOpen(t, dir, quietOpts())
	defer l.Close()
	if st := l.Stats(); st.TornBytesDropped != lay.TornBytes {
		t.Fatalf("Open cut %d bytes, Scan reported %d", st.TornBytesDropped, lay.TornBytes)
	}
}

func TestScanDamageInTheMiddle(t *testing.T) {
	dir, _ := buildLog(t, 30, 1024)
	segs, _ := listSegments(dir)
	first := filepath.Join(dir, segs[0].name)
	data, _ := os.ReadFile(first)
	ends := entryEnds(t, data)
	data[ends[1]-1] ^= 0xff // damage entry 2's compressed bytes
	os.WriteFile(first, data, 0o640)
	lay, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(lay.Damage) != 1 || lay.Damage[0].Index != 2 || lay.Damage[0].Segment != segs[0].name {
		t.Fatalf("damage %+v", lay.Damage)
	}
	got, _, err := scanAll(t, dir, 0, 0)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), segs[0].name) || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("error %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("%d entries before the damage, want 1", len(got))
	}
	if got, _, err := scanAll(t, dir, 3, 5); err != nil || len(got) != 3 {
		t.Fatalf("a range after the damage: %d entries, %v", len(got), err)
	}
	if _, _, err := scanAll(t, t.TempDir(), 0, 0); err != nil {
		t.Fatalf("empty dir: %v", err)
	}
}

func TestScanPendingTruncation(t *testing.T) {
	dir, _ := buildLog(t, 30, 1024)
	segs, _ := listSegments(dir)
	// An interrupted TruncateFront: the .START copy of the second segment.
	b, _ := os.ReadFile(filepath.Join(dir, segs[1].name))
	os.WriteFile(filepath.Join(dir, segs[1].name+".START"), b, 0o640)
	before := dirFiles(t, dir)
	lay, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if lay.Pending != segs[1].name+".START" || lay.FirstIndex != segs[1].index || len(lay.Ignored) != 2 {
		t.Fatalf("layout %+v", lay)
	}
	if !reflect.DeepEqual(before, dirFiles(t, dir)) {
		t.Fatal("Inspect changed the directory")
	}
}

// A segment other than the last whose framing breaks cannot be read by
// tidwall/wal at all (it parses a segment whole), although Open accepts the
// log: the read-only walk must say so, one gap up to the next segment, and
// not invent damage in the next segment (trailing bytes after whole entries
// were reported as "entries 121..120" unreadable and damage at 121).
func TestScanFramingBreakBeforeLastSegment(t *testing.T) {
	tests := []struct {
		name   string
		damage func(data []byte, ends []int) []byte
	}{
		{"trailing garbage after whole entries", func(data []byte, _ []int) []byte { return append(data, "garbage"...) }},
		{"last entry cut short", func(data []byte, ends []int) []byte { return data[:ends[len(ends)-1]-3] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := buildLog(t, 40, 300)
			segs, _ := listSegments(dir)
			if len(segs) < 4 {
				t.Fatalf("%d segments", len(segs))
			}
			seg, next := segs[1], segs[2]
			path := filepath.Join(dir, seg.name)
			data, _ := os.ReadFile(path)
			os.WriteFile(path, tt.damage(data, entryEnds(t, data)), 0o640)

			lay, err := Inspect(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := []Gap{{From: seg.index, To: next.index - 1}}
			if len(lay.Gaps) != 1 || lay.Gaps[0].From != want[0].From || lay.Gaps[0].To != want[0].To {
				t.Fatalf("gaps %+v, want one gap %d..%d", lay.Gaps, want[0].From, want[0].To)
			}
			for _, d := range lay.Damage {
				if d.Segment != seg.name || d.Index >= next.index {
					t.Errorf("damage outside the broken segment: %+v", d)
				}
			}
			// The walk agrees with the log: the next segment reads, the
			// broken one does not.
			l := mustOpen(t, dir, quietOpts())
			_, rerr := l.ReadEntry(seg.index)
			_, nerr := l.ReadEntry(next.index)
			l.Close()
			if rerr == nil || nerr != nil {
				t.Fatalf("log: read %d: %v; read %d: %v", seg.index, rerr, next.index, nerr)
			}
			if got, _, err := scanAll(t, dir, next.index, 0); err != nil || len(got) != 40-int(next.index)+1 {
				t.Fatalf("scan from %d: %d entries, %v", next.index, len(got), err)
			}
			got, _, err := scanAll(t, dir, seg.index+1, seg.index+1)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), seg.name) || len(got) != 0 {
				t.Fatalf("scan of entry %d: %d entries, %v", seg.index+1, len(got), err)
			}
		})
	}
}

// Inspect counts the entries the log could read (stat printed
// last-first+1 whatever the gaps and damage) and lists every segment, the
// last one too when Open would refuse it (bytes counted it, the table did
// not).
func TestInspectCountsReadableEntriesAndEverySegment(t *testing.T) {
	const n = 40
	tests := []struct {
		name string
		// damage changes the log and returns how many entries stay readable.
		damage  func(t *testing.T, dir string, segs []segFile) uint64
		wantErr bool
	}{
		{"clean", func(t *testing.T, dir string, segs []segFile) uint64 { return n }, false},
		{"a damaged entry", func(t *testing.T, dir string, segs []segFile) uint64 {
			path := filepath.Join(dir, segs[0].name)
			data, _ := os.ReadFile(path)
			data[entryEnds(t, data)[1]-1] ^= 0xff // entry 2's compressed bytes
			os.WriteFile(path, data, 0o640)
			return n - 1
		}, false},
		{"a missing segment", func(t *testing.T, dir string, segs []segFile) uint64 {
			os.Remove(filepath.Join(dir, segs[1].name))
			return n - (segs[2].index - segs[1].index)
		}, false},
		{"a framing break", func(t *testing.T, dir string, segs []segFile) uint64 {
			path := filepath.Join(dir, segs[1].name)
			data, _ := os.ReadFile(path)
			os.WriteFile(path, data[:len(data)-2], 0o640)
			return n - (segs[2].index - segs[1].index)
		}, false},
		{"a torn tail", func(t *testing.T, dir string, segs []segFile) uint64 {
			f, _ := os.OpenFile(tailPath(t, dir), os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte{50, 1, 2})
			f.Close()
			return n
		}, false},
		{"damage inside the last segment", func(t *testing.T, dir string, segs []segFile) uint64 {
			path := tailPath(t, dir)
			data, _ := os.ReadFile(path)
			ends := entryEnds(t, data)
			if len(ends) < 2 {
				t.Fatalf("tail segment holds %d entries", len(ends))
			}
			data[ends[0]-1] ^= 0xff // its first entry; a valid one follows
			os.WriteFile(path, data, 0o640)
			return uint64(int(segs[len(segs)-1].index) - 1)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := buildLog(t, n, 300)
			segs, _ := listSegments(dir)
			if len(segs) < 4 {
				t.Fatalf("%d segments", len(segs))
			}
			want := tt.damage(t, dir, segs)
			lay, err := Inspect(dir)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Inspect: %v", err)
			}
			if lay.Entries != want {
				t.Errorf("entries %d, want %d (range %d..%d)", lay.Entries, want, lay.FirstIndex, lay.LastIndex)
			}
			files, _ := listSegments(dir)
			var bytes int64
			for _, s := range lay.Segments {
				bytes += s.Bytes
			}
			if len(lay.Segments) != len(files) || bytes != lay.Bytes {
				t.Errorf("%d segments of %d bytes listed, %d files of %d bytes", len(lay.Segments), bytes, len(files), lay.Bytes)
			}
		})
	}
}
