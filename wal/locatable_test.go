package wal

import (
	"os"
	"path/filepath"
	"testing"
)

// Locatable tells where RepairTruncateBefore can cut: an entry held whole,
// or in a middle segment that breaks before it in a frame carrying its
// index, or past the log's end; not an entry of a missing segment, nor the
// first entry (nothing before it to cut).
func TestLocatable(t *testing.T) {
	dir, _ := buildLog(t, 60, 600)
	segs, err := listSegments(dir)
	if err != nil || len(segs) < 4 {
		t.Fatalf("segments %v, %v: want four or more", segs, err)
	}
	whole := func(i uint64) bool { return Locatable(dir, i) }
	for _, c := range []struct {
		index uint64
		want  bool
	}{{1, false}, {2, true}, {60, true}, {61, true}} {
		if got := whole(c.index); got != c.want {
			t.Errorf("whole log: Locatable(%d) = %v, want %v", c.index, got, c.want)
		}
	}

	// A middle segment whose first frame's length prefix breaks: its later
	// entries carry their index and are found.
	broken := segs[1]
	path := filepath.Join(dir, broken.name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ends := entryEnds(t, data)
	if len(ends) < 3 {
		t.Fatalf("segment %s holds %d entries: want three or more", broken.name, len(ends))
	}
	copy(data, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if !Locatable(dir, broken.index+2) {
		t.Errorf("entry %d, past a break in its segment: not locatable", broken.index+2)
	}

	// A missing middle segment: none of its entries can be found.
	gone := segs[2]
	if err := os.Remove(filepath.Join(dir, gone.name)); err != nil {
		t.Fatal(err)
	}
	if Locatable(dir, gone.index+1) {
		t.Errorf("entry %d of a missing segment: locatable", gone.index+1)
	}
	if !Locatable(dir, segs[3].index) {
		t.Errorf("entry %d, first of the segment after the missing one: not locatable", segs[3].index)
	}
}
