package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// buildLog writes n entries (entry i holds events of varying size) with the
// given segment size and returns the directory and the expected events.
func buildLog(t *testing.T, n, segSize int) (string, [][]engine.Event) {
	t.Helper()
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = segSize
	l := mustOpen(t, dir, o)
	var want [][]engine.Event
	for i := range n {
		evs := []engine.Event{storedEvent(uint64(i), uint64(i))}
		if i%2 == 1 {
			evs = append(evs, engine.Event{Worker: engine.WorkerKey{WorkerID: 9}, Kind: engine.KindRemoved, BlockHashes: []uint64{1, 2, 3}})
		}
		if _, err := l.Append(context.Background(), evs, []Position{{"p", uint64(i)}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, evs)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, want
}

// entryEnds returns the end offset of each entry of a segment file.
func entryEnds(t *testing.T, data []byte) []int {
	var ends []int
	for off := 0; off < len(data); {
		_, n, ok := nextEntry(data[off:])
		if !ok {
			t.Fatalf("segment not well framed at %d", off)
		}
		off += n
		ends = append(ends, off)
	}
	return ends
}

// tailPath returns the last segment file of dir.
func tailPath(t *testing.T, dir string) string {
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		t.Fatal(err)
	}
	return filepath.Join(dir, segs[len(segs)-1].name)
}

// readUntilError reads l from its first entry and returns how many entries
// it read before the first error, and that error (nil: none).
func readUntilError(l *Log) (int, error) {
	count := 0
	for _, err := range l.Entries(0) {
		if err != nil {
			return count, err
		}
		count++
	}
	return count, nil
}

// cloneDir copies dir's segment files into a new temp dir.
func cloneDir(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	segs, _ := listSegments(dir)
	for _, s := range segs {
		if _, err := copyFile(filepath.Join(dir, s.name), filepath.Join(out, s.name)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkPrefix opens dir and checks that it holds exactly want[:n].
func checkPrefix(t *testing.T, dir string, want [][]engine.Event, n int) *Log {
	t.Helper()
	return checkRange(t, dir, want, 1, uint64(n))
}

// checkRange opens dir and checks that it holds exactly entries from..to,
// equal to want's (want[i] is entry i+1).
func checkRange(t *testing.T, dir string, want [][]engine.Event, from, to uint64) *Log {
	t.Helper()
	l, err := Open(dir, quietOpts())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	if first != from || last != to {
		l.Close()
		t.Fatalf("log holds entries %d..%d, want %d..%d", first, last, from, to)
	}
	for _, e := range readAll(t, l, first) {
		if !reflect.DeepEqual(e.Events, normalize(want[e.Index-1])) {
			l.Close()
			t.Fatalf("entry %d differs", e.Index)
		}
	}
	return l
}

func TestTornTailEveryOffset(t *testing.T) {
	for _, segSize := range []int{1 << 20, 300} { // one segment; many segments
		t.Run(fmt.Sprint("segment=", segSize), func(t *testing.T) {
			const n = 12
			src, want := buildLog(t, n, segSize)
			segs, _ := listSegments(src)
			tail := tailPath(t, src)
			data, _ := os.ReadFile(tail)
			ends := entryEnds(t, data)
			if len(ends) < 3 {
				t.Fatalf("tail segment holds %d entries", len(ends))
			}
			inTail := len(ends)
			before := n - inTail // entries in earlier segments
			start := 0
			if len(ends) > 3 {
				start = ends[len(ends)-4]
			}
			for cut := start; cut < len(data); cut++ {
				dir := cloneDir(t, src)
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(tail)), data[:cut], 0o640); err != nil {
					t.Fatal(err)
				}
				complete := 0
				for _, e := range ends {
					if e <= cut {
						complete++
					}
				}
				l := checkPrefix(t, dir, want, before+complete)
				if st := l.Stats(); st.TornBytesDropped != int64(cut-endOr0(ends, complete)) {
					t.Fatalf("cut %d: dropped %d", cut, st.TornBytesDropped)
				}
				// The log stays appendable after the repair.
				if idx, err := l.Append(context.Background(), want[0], nil); err != nil || idx != uint64(before+complete+1) {
					t.Fatalf("cut %d: append after repair: %d %v", cut, idx, err)
				}
				l.Close()
			}
			_ = segs
		})
	}
}

func endOr0(ends []int, k int) int {
	if k == 0 {
		return 0
	}
	return ends[k-1]
}

func TestFlipLastEntryCut(t *testing.T) {
	const n = 6
	src, want := buildLog(t, n, 1<<20)
	tail := tailPath(t, src)
	data, _ := os.ReadFile(tail)
	ends := entryEnds(t, data)
	for i := ends[len(ends)-2]; i < len(data); i++ {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			dir := cloneDir(t, src)
			b := append([]byte(nil), data...)
			b[i] ^= mask
			os.WriteFile(filepath.Join(dir, filepath.Base(tail)), b, 0o640)
			l := checkPrefix(t, dir, want, n-1)
			if l.Stats().TornBytesDropped <= 0 {
				t.Fatalf("byte %d mask %x: nothing dropped", i, mask)
			}
			l.Close()
		}
	}
}

func TestZeroTailCut(t *testing.T) {
	src, want := buildLog(t, 3, 1<<20)
	tail := tailPath(t, src)
	f, _ := os.OpenFile(tail, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(make([]byte, 4096)) // zeros read as phantom empty entries by tidwall/wal
	f.Close()
	l := checkPrefix(t, src, want, 3)
	if l.Stats().TornBytesDropped != 4096 {
		t.Fatalf("dropped %d", l.Stats().TornBytesDropped)
	}
	l.Close()
}

func TestMiddleDamageRefused(t *testing.T) {
	const n = 6
	src, _ := buildLog(t, n, 1<<20)
	tail := tailPath(t, src)
	data, _ := os.ReadFile(tail)
	ends := entryEnds(t, data)
	type flip struct {
		at   int
		mask byte
	}
	for k := 0; k < len(ends)-1; k++ { // every entry but the last
		start := endOr0(ends, k)
		// The length prefix's high bits too: a longer length makes the
		// rest of the segment look like one incomplete entry (the issue's
		// case of a torn tail that is not one).
		for _, f := range []flip{{start, 0x01}, {start, 0x40}, {start, 0x80}, {start + 1, 0x01}, {start + 1, 0x80}, {start + 3, 0x01}, {ends[k] - 1, 0x01}} {
			i := f.at
			dir := cloneDir(t, src)
			b := append([]byte(nil), data...)
			b[i] ^= f.mask
			os.WriteFile(filepath.Join(dir, filepath.Base(tail)), b, 0o640)
			_, err := Open(dir, quietOpts())
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("entry %d byte %d: open = %v", k+1, i, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, filepath.Base(tail)) || !strings.Contains(msg, fmt.Sprintf("offset %d:", start)) {
				t.Fatalf("error does not name segment and offset %d: %v", start, msg)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, filepath.Base(tail))); len(got) != len(b) {
				t.Fatal("refused open still cut the segment")
			}
		}
	}
}

func TestEarlierSegmentDamageOnRead(t *testing.T) {
	src, _ := buildLog(t, 30, 300)
	segs, _ := listSegments(src)
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	first := filepath.Join(src, segs[0].name)
	data, _ := os.ReadFile(first)
	ends := entryEnds(t, data)
	data[ends[0]+3] ^= 0x01 // a CRC byte of entry 2
	os.WriteFile(first, data, 0o640)
	l, err := Open(src, quietOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	count, got := readUntilError(l)
	if count != 1 || !errors.Is(got, ErrCorrupt) || !strings.Contains(got.Error(), segs[0].name) ||
		!strings.Contains(got.Error(), fmt.Sprintf("offset %d:", ends[0])) {
		t.Fatalf("read %d entries then %v", count, got)
	}
}

func TestRepairTruncateAfter(t *testing.T) {
	const n = 30
	src, want := buildLog(t, n, 300)
	// Damage entry 20 so Open refuses, then cut after 19.
	segs, _ := listSegments(src)
	var holder segFile
	for _, s := range segs {
		if s.index <= 20 {
			holder = s
		}
	}
	path := filepath.Join(src, holder.name)
	data, _ := os.ReadFile(path)
	ends := entryEnds(t, data)
	off := endOr0(ends, int(20-holder.index))
	data[off+2] ^= 0x01
	os.WriteFile(path, data, 0o640)
	if holder.name == segs[len(segs)-1].name {
		t.Fatal("test needs entry 20 outside the tail segment")
	}
	// Damage outside the tail is only seen while reading.
	l := mustOpen(t, src, nil)
	count, _ := readUntilError(l)
	l.Close()
	if count != 19 {
		t.Fatalf("read %d entries before the damage", count)
	}
	backup := t.TempDir()
	if err := RepairTruncateAfter(src, 19, backup); err != nil {
		t.Fatal(err)
	}
	bsegs, _ := listSegments(backup)
	if len(bsegs) == 0 || bsegs[0].name != holder.name {
		t.Fatalf("backup holds %v", bsegs)
	}
	l = checkPrefix(t, src, want, 19)
	if idx, err := l.Append(context.Background(), want[0], nil); err != nil || idx != 20 {
		t.Fatalf("append after repair: %d %v", idx, err)
	}
	l.Close()
	// Cutting on a segment boundary and cutting everything.
	for _, cut := range []uint64{holder.index - 1, 0} {
		if err := RepairTruncateAfter(src, cut, t.TempDir()); err != nil {
			t.Fatalf("cut after %d: %v", cut, err)
		}
		l = checkPrefix(t, src, want, int(cut))
		l.Close()
	}
}

// dirFiles returns the contents of every regular file in dir, to prove
// that what should change nothing changed nothing.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = string(b)
		}
	}
	return out
}

// A repair must never overwrite a file in its backup directory: not an
// earlier repair's backup, and not the segment it is copying (a backup
// directory that is the log directory truncated the segment to nothing).
func TestRepairBackupNeverOverwrites(t *testing.T) {
	const n = 30
	tests := []struct {
		name    string
		backup  func(t *testing.T, dir string) string // the backup directory of the second cut
		wantErr string
	}{
		{"same backup twice", func(t *testing.T, dir string) string { return filepath.Join(filepath.Dir(dir), "bak") }, "already exists"},
		{"the log directory", func(t *testing.T, dir string) string { return dir }, "is the log directory itself"},
		{"the log directory by another name", func(t *testing.T, dir string) string { return dir + "/." }, "is the log directory itself"},
		{"the log directory through a symlink", func(t *testing.T, dir string) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(dir, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "is the log directory itself"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, _ := buildLog(t, n, 1<<20) // one segment: both cuts change it
			dir := filepath.Join(t.TempDir(), "wal")
			if err := os.Mkdir(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			for name, b := range dirFiles(t, src) {
				os.WriteFile(filepath.Join(dir, name), []byte(b), 0o640)
			}
			// A first cut keeps its backup in bak.
			bak := filepath.Join(filepath.Dir(dir), "bak")
			if err := RepairTruncateAfter(dir, n-1, bak); err != nil {
				t.Fatal(err)
			}
			log, kept := dirFiles(t, dir), dirFiles(t, bak)
			// A second cut, in the same segment, must refuse and change nothing.
			backup := tt.backup(t, dir)
			err := RepairTruncateAfter(dir, n-2, backup)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("second cut: %v, want an error with %q", err, tt.wantErr)
			}
			if tt.wantErr == "already exists" && !strings.Contains(err.Error(), filepath.Join(bak, segsOf(t, bak)[0])) {
				t.Errorf("error does not name the backup file: %v", err)
			}
			if got := dirFiles(t, dir); !reflect.DeepEqual(got, log) {
				t.Error("the refused cut changed the log")
			}
			if got := dirFiles(t, bak); !reflect.DeepEqual(got, kept) {
				t.Error("the refused cut changed the first backup")
			}
		})
	}
}

// segsOf returns the segment file names in dir.
func segsOf(t *testing.T, dir string) []string {
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments of %s: %v %v", dir, segs, err)
	}
	var names []string
	for _, s := range segs {
		names = append(names, s.name)
	}
	return names
}

// A repair of a directory that does not exist fails without creating it
// (LockDir used to create it and leave its LOCK file behind).
func TestRepairMissingDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o644)
	for _, dir := range []string{filepath.Join(base, "nope", "wal"), filepath.Join(base, "wal"), file} {
		err := RepairTruncateAfter(dir, 0, filepath.Join(base, "bak"))
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("repair of %s: %v", dir, err)
		}
	}
	if ents, _ := os.ReadDir(base); len(ents) != 1 {
		t.Fatalf("the failed repairs left %v behind", ents)
	}
}

// A cut after an index past the last entry is refused as such, changing
// nothing (it said the entry after the last was incomplete, "wal corrupt",
// and the largest index overflowed).
func TestRepairPastTheEnd(t *testing.T) {
	const n = 30
	for _, index := range []uint64{n + 1, n + 100, ^uint64(0)} {
		t.Run(fmt.Sprint(index), func(t *testing.T) {
			dir, _ := buildLog(t, n, 300)
			before := dirFiles(t, dir)
			backup := filepath.Join(t.TempDir(), "bak")
			err := RepairTruncateAfter(dir, index, backup)
			want := fmt.Sprintf("index %d is past the last entry %d", index, n)
			if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("cut after %d: %v, want %q", index, err, want)
			}
			if !reflect.DeepEqual(dirFiles(t, dir), before) {
				t.Error("the refused cut changed the log")
			}
			if _, err := os.Stat(backup); err == nil {
				t.Error("the refused cut made a backup")
			}
		})
	}
	// A cut after the last entry has nothing to remove: refused as such,
	// with no backup (it reported a cut and copied the untouched tail).
	dir, want := buildLog(t, n, 300)
	before := dirFiles(t, dir)
	backup := filepath.Join(t.TempDir(), "bak")
	if err := RepairTruncateAfter(dir, n, backup); !errors.Is(err, ErrNothingToCut) || !strings.Contains(err.Error(), "entry 30 is the last") {
		t.Fatalf("cut after the last entry: %v, want nothing to cut", err)
	}
	if !reflect.DeepEqual(dirFiles(t, dir), before) {
		t.Error("the refused cut changed the log")
	}
	if _, err := os.Stat(backup); err == nil {
		t.Error("the refused cut made a backup")
	}
	checkPrefix(t, dir, want, n).Close()
	// After a torn tail, the same cut removes the torn bytes.
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, segs[len(segs)-1].name), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0x7f, 1, 2})
	f.Close()
	if err := RepairTruncateAfter(dir, n, filepath.Join(t.TempDir(), "bak")); err != nil {
		t.Fatalf("cut of a torn tail after the last entry: %v", err)
	}
	if !reflect.DeepEqual(dirFiles(t, dir), before) {
		t.Error("the cut did not restore the log as it was before the torn bytes")
	}
	checkPrefix(t, dir, want, n).Close()
}

// A segment before the last that is missing, or cut short, or badly framed
// is damage inside the log: reading an entry it should hold fails with
// ErrCorrupt naming a segment (tidwall/wal panicked with an index out of
// range for the first two, and said only "log corrupt" for the third).
func TestReadEntryBadEarlierSegment(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string, seg segFile)
	}{
		{"missing", func(t *testing.T, dir string, seg segFile) {
			if err := os.Remove(filepath.Join(dir, seg.name)); err != nil {
				t.Fatal(err)
			}
		}},
		{"short", func(t *testing.T, dir string, seg segFile) {
			p := filepath.Join(dir, seg.name)
			data, _ := os.ReadFile(p)
			ends := entryEnds(t, data)
			os.WriteFile(p, data[:ends[len(ends)-2]], 0o640) // its last entry gone
		}},
		{"framing", func(t *testing.T, dir string, seg segFile) {
			p := filepath.Join(dir, seg.name)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, data[:len(data)-3], 0o640) // its last entry torn
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := buildLog(t, 30, 300)
			segs, _ := listSegments(dir)
			if len(segs) < 4 {
				t.Fatalf("%d segments", len(segs))
			}
			tt.damage(t, dir, segs[1])
			l := mustOpen(t, dir, nil)
			defer l.Close()
			count, got := readUntilError(l)
			if got == nil || !errors.Is(got, ErrCorrupt) || !strings.Contains(got.Error(), "segment ") {
				t.Fatalf("read %d entries then %v, want ErrCorrupt naming a segment", count, got)
			}
			if uint64(count) >= segs[2].index-1 {
				t.Fatalf("read %d entries past the damage", count)
			}
			t.Log(got)
		})
	}
}

// TestMiddleDamageNamesTheRepair checks that the refusal of damage inside the
// log, from Open and from the read-only Scan, names the damaged entry and the
// kvidx wal repair command whose --truncate-after keeps every entry before it,
// and that this cut lets the log open.
func TestMiddleDamageNamesTheRepair(t *testing.T) {
	const n = 5
	src, want := buildLog(t, n, 1<<20)
	tail := tailPath(t, src)
	data, _ := os.ReadFile(tail)
	ends := entryEnds(t, data)
	for _, damaged := range []int{1, 2, n - 1} { // 1-based; the last entry's damage is a torn tail
		t.Run(fmt.Sprintf("entry%d", damaged), func(t *testing.T) {
			dir := cloneDir(t, src)
			b := append([]byte(nil), data...)
			b[endOr0(ends, damaged-1)+1] ^= 0x01
			os.WriteFile(filepath.Join(dir, filepath.Base(tail)), b, 0o640)
			wantMsg := []string{
				fmt.Sprintf("entry %d is invalid", damaged),
				fmt.Sprintf("kvidx wal repair DATA_DIR --truncate-after %d --yes", damaged-1),
			}
			_, openErr := Open(dir, quietOpts())
			_, _, scanErr := scanAll(t, dir, 0, 0)
			for name, err := range map[string]error{"open": openErr, "scan": scanErr} {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s = %v, want ErrCorrupt", name, err)
				}
				for _, w := range wantMsg {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s error %q does not say %q", name, err, w)
					}
				}
			}
			if err := RepairTruncateAfter(dir, uint64(damaged-1), filepath.Join(t.TempDir(), "bak")); err != nil {
				t.Fatalf("the named repair: %v", err)
			}
			checkPrefix(t, dir, want, damaged-1).Close()
		})
	}
}

// TestRepairTruncateBefore cuts the front of a log of many segments: at an
// entry inside a segment, at a segment's first entry, one past the last
// entry (an empty log that continues there), and past a last segment whose
// framing breaks (the bytes after the break cannot be located).
func TestRepairTruncateBefore(t *testing.T) {
	const n = 30
	tests := []struct {
		name       string
		before     uint64
		breakTail  bool // damage the last segment's framing first
		unlocated  bool
		firstEntry uint64 // of the log after the cut
	}{
		{"inside a segment", 17, false, false, 17},
		{"the last entry", n, false, false, n},
		{"one past the end", n + 1, false, false, n + 1},
		{"past the end", n + 50, false, false, n + 50},
		{"past a broken tail", n + 1, true, true, n + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, want := buildLog(t, n, 300)
			segs, _ := listSegments(src)
			if tt.breakTail {
				tail := filepath.Join(src, segs[len(segs)-1].name)
				data, _ := os.ReadFile(tail)
				data[0] = 0xff // a length prefix past the segment's end
				os.WriteFile(tail, data, 0o640)
			}
			backup := filepath.Join(t.TempDir(), "backup")
			unlocated, err := RepairTruncateBefore(src, tt.before, backup, tt.unlocated)
			if err != nil {
				t.Fatal(err)
			}
			if (unlocated > 0) != tt.unlocated {
				t.Fatalf("unlocated %d bytes", unlocated)
			}
			// Every segment before the one holding the cut is kept in the backup.
			for _, s := range segs {
				if s.index < min(tt.before, segs[len(segs)-1].index) {
					if _, err := os.Stat(filepath.Join(backup, s.name)); err != nil {
						t.Errorf("segment %s not backed up: %v", s.name, err)
					}
				}
			}
			last := max(n, tt.before-1)
			l := checkRange(t, src, want, tt.firstEntry, last)
			defer l.Close()
			if idx, err := l.Append(context.Background(), nil, nil); err != nil || idx != last+1 {
				t.Fatalf("append after the cut: %d, %v; want %d", idx, err, last+1)
			}
		})
	}
}

func TestRepairTruncateBeforeRefuses(t *testing.T) {
	src, _ := buildLog(t, 10, 300)
	for _, before := range []uint64{0, 1} {
		if _, err := RepairTruncateBefore(src, before, filepath.Join(t.TempDir(), "b"), false); !errors.Is(err, ErrNothingToCut) {
			t.Errorf("before %d: %v, want nothing to cut", before, err)
		}
	}
	if _, err := RepairTruncateBefore(filepath.Join(src, "nope"), 5, t.TempDir(), false); err == nil {
		t.Error("a missing directory was accepted")
	}
	if _, err := RepairTruncateBefore(t.TempDir(), 0, t.TempDir(), false); err == nil || !strings.Contains(err.Error(), "start at 1") {
		t.Errorf("an empty log cut before 0: %v", err)
	}
}

// A log with no segment (its wal/ directory lost, the snapshots kept) is
// made to begin at the index given: recovery advises exactly this cut when
// a snapshot holds everything, and it failed with "no segments".
func TestRepairTruncateBeforeEmptyLog(t *testing.T) {
	dir := t.TempDir()
	backup := filepath.Join(t.TempDir(), "backup")
	if _, err := RepairTruncateBefore(dir, 2135, backup, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(backup); err == nil {
		t.Error("a backup was made of nothing")
	}
	l, err := Open(dir, &Options{Sync: SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if idx, err := l.Append(context.Background(), nil, nil); err != nil || idx != 2135 {
		t.Fatalf("first append: %d, %v; want 2135", idx, err)
	}
}

// TestInterruptedTruncateBefore: a crash after the new first segment is
// written (as NAME.START) and before the older segments are deleted leaves
// a log that Open finishes cutting.
func TestInterruptedTruncateBefore(t *testing.T) {
	const n, before = 30, 17
	src, want := buildLog(t, n, 300)
	segs, _ := listSegments(src)
	var holder segFile
	for _, s := range segs {
		if s.index <= before {
			holder = s
		}
	}
	data, _ := os.ReadFile(filepath.Join(src, holder.name))
	ends := entryEnds(t, data)
	off := endOr0(ends, int(before-holder.index))
	if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("%020d.START", before)), data[off:], 0o640); err != nil {
		t.Fatal(err)
	}
	checkRange(t, src, want, before, n).Close()
}

// errCrash is what a crash hook panics with: the process died there.
var errCrash = errors.New("simulated crash")

// crashRepairBefore runs RepairTruncateBefore with a crash at the nth call
// of step; at the step "written" the file just written is first cut to half
// its size (it was not fsynced yet, or the crash came mid-write). It
// reports whether the crash happened.
func crashRepairBefore(t *testing.T, dir string, before uint64, step string, nth int) (crashed bool) {
	t.Helper()
	calls := 0
	hook := func(s, path string) {
		if s != step {
			return
		}
		if calls++; calls != nth {
			return
		}
		if s == "written" {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}
		crashed = true
		panic(errCrash)
	}
	defer func() {
		if v := recover(); v != nil && v != errCrash {
			panic(v)
		}
	}()
	if _, err := repairTruncateBefore(dir, before, filepath.Join(t.TempDir(), "backup"), false, hook); err != nil {
		t.Fatal(err)
	}
	return crashed
}

// TestRepairTruncateBeforeCrash: whatever step of RepairTruncateBefore a
// crash interrupts, even the write of the new first segment, Open finds
// either the log as it was or the cut finished, never fewer entries.
func TestRepairTruncateBeforeCrash(t *testing.T) {
	const n = 30
	for _, before := range []uint64{17, n} { // inside a middle segment; inside the last one
		for _, step := range []string{"written", "removed"} {
			for nth := 1; ; nth++ {
				src, want := buildLog(t, n, 300)
				if !crashRepairBefore(t, src, before, step, nth) {
					break
				}
				t.Run(fmt.Sprintf("before=%d/%s#%d", before, step, nth), func(t *testing.T) {
					l, err := Open(src, quietOpts())
					if err != nil {
						t.Fatalf("open after the crash: %v", err)
					}
					first, _ := l.FirstIndex()
					l.Close()
					if first != 1 {
						first = before
					}
					checkRange(t, src, want, first, n).Close()
					if first == 1 { // nothing was cut: the repair runs again
						if _, err := RepairTruncateBefore(src, before, filepath.Join(t.TempDir(), "backup"), false); err != nil {
							t.Fatalf("repair again: %v", err)
						}
						checkRange(t, src, want, before, n).Close()
					}
				})
			}
		}
	}
}

// Damaged framing before index: a snapshot would hold entries 1..4, and
// entry 1's length prefix is damaged so that counting frames resynchronises
// on garbage (the walk would land inside an entry) or breaks for good.
// Version 2 frames carry their index: the cut finds entry 5 by it and keeps
// 5..n. Version 1 frames (logs written before) carry none, and the entries
// after the break cannot be numbered: the repair refuses and changes
// nothing, and drops them as unlocated only on request.
func TestRepairTruncateBeforeUnlocatedAfterIndex(t *testing.T) {
	const n = 30
	for _, tt := range []struct {
		name   string
		prefix []byte // written over entry 1's length prefix
	}{
		{"framing resynchronises", []byte{0xff}},
		{"framing breaks", []byte{0xff, 0xff, 0xff, 0x7f}},
	} {
		for _, v1 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/version1=%v", tt.name, v1), func(t *testing.T) {
				src, want := buildLog(t, n, 1<<20) // one segment
				segs, _ := listSegments(src)
				path := filepath.Join(src, segs[0].name)
				if v1 {
					toVersion1(t, path)
				}
				data, _ := os.ReadFile(path)
				copy(data, tt.prefix)
				if err := os.WriteFile(path, data, 0o640); err != nil {
					t.Fatal(err)
				}
				if !v1 {
					if _, err := RepairTruncateBefore(src, 5, filepath.Join(t.TempDir(), "backup"), false); err != nil {
						t.Fatalf("cut before 5: %v", err)
					}
					checkRange(t, src, want, 5, n).Close()
					return
				}
				before := dirFiles(t, src)
				unlocated, err := RepairTruncateBefore(src, 5, filepath.Join(t.TempDir(), "backup"), false)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cannot be located") {
					t.Fatalf("cut after damaged framing: unlocated %d, %v; want a refusal", unlocated, err)
				}
				if after := dirFiles(t, src); !reflect.DeepEqual(after, before) {
					t.Fatal("the refused repair changed the log")
				}
				if tt.name == "framing breaks" {
					// Allowed explicitly, they go, and the log continues at 5.
					unlocated, err := RepairTruncateBefore(src, 5, filepath.Join(t.TempDir(), "backup"), true)
					if err != nil || unlocated != int64(len(data)) {
						t.Fatalf("allowed: unlocated %d, %v", unlocated, err)
					}
					checkRange(t, src, want, 5, 4).Close()
				}
			})
		}
	}
}

// toVersion1 rewrites a segment file's entries as version 1 frames, which
// carry no index (what logs written before version 2 hold).
func toVersion1(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for off := 0; off < len(data); {
		p, k, ok := nextEntry(data[off:])
		if !ok {
			break
		}
		off += k
		_, z, err := frameData(p)
		if err != nil {
			break // the preallocated fill
		}
		f := append([]byte{formatVersion1, 0, 0, 0, 0}, z...)
		binary.LittleEndian.PutUint32(f[1:frameHeader], crc32.Checksum(z, castagnoli))
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	if err := os.WriteFile(path, out, 0o640); err != nil {
		t.Fatal(err)
	}
}

// A log whose first segment file was renamed to a lower index (after a
// front truncation, say) numbers every entry wrong: reading it must fail
// naming the entry, never return another entry's events (recovery replayed
// them, skipping acknowledged entries and reviving a removed block). Found
// by review.
func TestRenamedSegmentRefused(t *testing.T) {
	dir, _ := buildLog(t, 30, 300)
	segs, err := listSegments(dir)
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	// Drop the first segment, as a front truncation does, then give the
	// second one the first one's name.
	first, second := segs[0], segs[1]
	if err := os.Remove(filepath.Join(dir, first.name)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, second.name), filepath.Join(dir, first.name)); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir, quietOpts())
	defer l.Close()
	_, err = l.ReadEntry(first.index)
	want := fmt.Sprintf("the entry read as entry %d is entry %d", first.index, second.index)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("read of entry %d: %v, want ErrCorrupt with %q", first.index, err, want)
	}
	// The read-only walk (kvidx wal dump) refuses it too.
	if _, err := Scan(dir, 0, 0, func(Entry) error { return nil }); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("scan: %v, want ErrCorrupt with %q", err, want)
	}
}

// swallow widens the length prefix of the entry that ends at ends[k-1] (or
// starts the segment, k = 0) so that its frame takes in the next n entries
// too: tidwall/wal's framing still parses, its CRC fails, and counting
// frames after it is n short. It assumes 1-byte length prefixes.
func swallow(t *testing.T, path string, k, n int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ends := entryEnds(t, data)
	start := 0
	if k > 0 {
		start = ends[k-1]
	}
	size := ends[k+n] - start - 1
	if data[start] >= 0x80 || size >= 0x80 {
		t.Fatalf("entry at %d: want 1-byte length prefixes", start)
	}
	data[start] = byte(size)
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// A damaged length prefix makes counting frames miss entries: the cut
// before an index locates that entry by the index its frame carries, and
// keeps it and every later one, or refuses when the entry itself is
// damaged. Found by review: the cut counted frames and dropped entries no
// snapshot held.
func TestRepairTruncateBeforeMiscountedFraming(t *testing.T) {
	cases := []struct {
		name    string
		last    bool // the damage in the last segment, else in segment 8 (8..14)
		index   uint64
		refused bool
	}{
		// Entry 9's frame takes in 10 and 11, whose bytes are intact.
		{"earlier segment, entry inside the damaged frame", false, 11, false},
		{"earlier segment, first entry after the damaged frame", false, 12, false},
		{"earlier segment, later entry", false, 13, false},
		{"earlier segment, entry itself damaged too", false, 10, true},
		{"last segment, after the damaged frame", true, 18, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			o := quietOpts()
			o.SegmentSize = 200
			l := mustOpen(t, dir, o)
			lastIndex := 30
			if c.last {
				lastIndex = 18 // segments 1 (1..7), 8 (8..14), 15 (15..18)
			}
			appendN(t, l, 1, lastIndex)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if c.last {
				swallow(t, tailPath(t, dir), 1, 1) // entry 16 takes in 17
			} else {
				seg := filepath.Join(dir, "00000000000000000008")
				if c.refused {
					flipByte(t, seg, c.index-8)
				}
				swallow(t, seg, 1, 2) // 9 takes in 10, 11
			}
			_, err := RepairTruncateBefore(dir, c.index, filepath.Join(t.TempDir(), "backup"), false)
			if c.refused {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("entry %d is missing or damaged", c.index)) {
					t.Fatalf("cut before %d: %v, want a refusal naming the entry", c.index, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("cut before %d: %v", c.index, err)
			}
			l2, err := Open(dir, quietOpts())
			if err != nil {
				t.Fatalf("open after the cut: %v", err)
			}
			defer l2.Close()
			if first, _ := l2.FirstIndex(); first != c.index {
				t.Errorf("first index %d, want %d", first, c.index)
			}
			if last, _ := l2.LastIndex(); last != uint64(lastIndex) {
				t.Errorf("last index %d, want %d", last, lastIndex)
			}
			n, err := readUntilError(l2)
			if err != nil || n != lastIndex+1-int(c.index) {
				t.Errorf("read %d entries (%v), want %d..%d", n, err, c.index, lastIndex)
			}
		})
	}
}

// Entries that counting frames misnumbers after a damaged length prefix
// are not readable, and Inspect does not count them as readable (found by
// review: it counted frames that carry another entry's index).
func TestInspectMislabelledEntries(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 200
	l := mustOpen(t, dir, o)
	appendN(t, l, 1, 30)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	swallow(t, filepath.Join(dir, "00000000000000000008"), 1, 2)
	lay, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	readable := uint64(0)
	for i := lay.FirstIndex; i <= lay.LastIndex; i++ {
		if _, err := Scan(dir, i, i, func(Entry) error { return nil }); err == nil {
			readable++
		}
	}
	if lay.Entries != readable {
		t.Errorf("Inspect counts %d entries readable, %d read", lay.Entries, readable)
	}
	found := false
	for _, d := range lay.Damage {
		found = found || strings.Contains(d.Desc, "the entry read as entry 10 is entry 12")
	}
	if !found {
		t.Errorf("damage %v does not name the mislabelled entry", lay.Damage)
	}
}

// flipByte flips the last byte of the k-th entry (from 0) of a segment file.
func flipByte(t *testing.T, path string, k uint64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[entryEnds(t, data)[k]-1] ^= 0x20
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// A segment an older kvidx wrote (version 1 frames) and this one continued
// (version 2 frames): the cut before a version 1 entry finds it by counting
// (found by review: it took the first version 2 frame for the entry's
// successor and refused a healthy log).
func TestRepairTruncateBeforeMixedVersions(t *testing.T) {
	dir, want := mixedLog(t, 1<<20, 10, 20)
	if _, err := RepairTruncateBefore(dir, 5, filepath.Join(t.TempDir(), "backup"), false); err != nil {
		t.Fatalf("cut before 5 of a healthy log of both versions: %v", err)
	}
	checkRange(t, dir, want, 5, 20).Close()
}

// An entry whose data spells a valid frame of a later index (block hashes
// are any 64-bit values): on a healthy log the cut follows the framing, not
// the first bytes that look like entry INDEX (found by review: the cut
// landed inside entry 3, and the log's real entries 6..10 were lost).
func TestRepairTruncateBeforeFrameInsideEntry(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 1 << 20
	l := mustOpen(t, dir, o)
	ctx := context.Background()
	for i := 1; i <= 10; i++ {
		evs := []engine.Event{storedEvent(uint64(i), uint64(i))}
		if i == 3 {
			f := frame(nil, 6, encodeBatch(nil, []engine.Event{storedEvent(77, 77)}, nil))
			fake := append(binary.AppendUvarint(nil, uint64(len(f))), f...)
			for len(fake)%8 != 0 {
				fake = append(fake, 0)
			}
			var hs []uint64
			for k := 0; k < len(fake); k += 8 {
				hs = append(hs, binary.LittleEndian.Uint64(fake[k:]))
			}
			evs = append(evs, engine.Event{Worker: engine.WorkerKey{WorkerID: 9}, Kind: engine.KindRemoved, BlockHashes: hs})
		}
		if _, err := l.Append(ctx, evs, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := RepairTruncateBefore(dir, 6, filepath.Join(t.TempDir(), "backup"), false); err != nil {
		t.Fatalf("cut before 6: %v", err)
	}
	l = mustOpen(t, dir, o)
	defer l.Close()
	if first, _ := l.FirstIndex(); first != 6 {
		t.Errorf("first index %d, want 6", first)
	}
	if n, err := readUntilError(l); err != nil || n != 5 {
		t.Errorf("read %d entries (%v), want 6..10", n, err)
	}
}

// threeSegmentLog returns the directory of a closed log of entries 1..18
// in segments 1, 8 and 15 (15..18, the last).
func threeSegmentLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 200
	l := mustOpen(t, dir, o)
	appendN(t, l, 1, 18)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// An entry missing from the last segment (its bytes gone, the later ones
// whole) leaves valid frames that carry other indexes than the ones they
// are read as: damage inside the log, refused by Open and predicted by
// Inspect alike, never cut as a torn tail (the valid entries after it were
// acknowledged). Found by review: Inspect predicted a cut, Open opened the
// log and reading failed later.
func TestMissingEntryInLastSegmentRefused(t *testing.T) {
	for _, k := range []int{1, 2} { // entry 16 (17 and 18 after it), entry 17 (18 after it)
		t.Run(fmt.Sprint("entry=", 15+k), func(t *testing.T) {
			dir := threeSegmentLog(t)
			path := tailPath(t, dir)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ends := entryEnds(t, inUse(data))
			data = append(data[:ends[k-1]:ends[k-1]], data[ends[k]:]...)
			if err := os.WriteFile(path, data, 0o640); err != nil {
				t.Fatal(err)
			}
			var de *DamageError
			if _, err := Inspect(dir); !errors.As(err, &de) || de.Entry != uint64(15+k) {
				t.Errorf("Inspect: %v, want damage at entry %d", err, 15+k)
			}
			if _, err := Open(dir, quietOpts()); !errors.As(err, &de) || de.Entry != uint64(15+k) {
				t.Errorf("Open: %v, want damage at entry %d", err, 15+k)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
				t.Error("the segment was changed")
			}
		})
	}
}

// The refusal of an entry missing from the last segment names the entry
// found in its place: a later one when entries were lost, an earlier one
// when the segment file is not the one its name says, which the refusal
// tells how to put back. Found by an audit: a tail segment renamed from
// 15 to 16 was refused as "the valid entry there is a later one" (it was
// entry 15), the only way out named a cut that drops every entry of it.
func TestMissingEntryRefusalNamesEntryFound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir, path string)
		entry  uint64
		found  uint64
		want   []string
	}{
		{"entry lost", func(t *testing.T, dir, path string) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ends := entryEnds(t, inUse(data))
			data = append(data[:ends[0]:ends[0]], data[ends[1]:]...) // entry 16
			if err := os.WriteFile(path, data, 0o640); err != nil {
				t.Fatal(err)
			}
		}, 16, 17, []string{"entry 16 is missing: the valid entry there is entry 17, a later one"}},
		{"segment renamed", func(t *testing.T, dir, path string) {
			if err := os.Rename(path, filepath.Join(dir, fmt.Sprintf("%020d", 16))); err != nil {
				t.Fatal(err)
			}
		}, 16, 15, []string{"entry 16 is missing: the valid entry there is entry 15, an earlier one",
			fmt.Sprintf("segment file %020d begins with entry 15, as a segment file named %020d would", 16, 15)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := threeSegmentLog(t)
			tc.damage(t, dir, tailPath(t, dir))
			for name, open := range map[string]func() error{
				"Inspect": func() error { _, err := Inspect(dir); return err },
				"Open":    func() error { _, err := Open(dir, quietOpts()); return err },
			} {
				err := open()
				var de *DamageError
				if !errors.As(err, &de) || de.Entry != tc.entry || de.Found != tc.found {
					t.Fatalf("%s: %v (%+v), want entry %d missing, entry %d found", name, err, de, tc.entry, tc.found)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %v\nwant it to say %q", name, err, w)
					}
				}
			}
		})
	}
}

// A segment of version 1 entries 1..10 continued with version 2 entries
// 11..20, entry 3 damaged (its CRC fails, the framing intact): the cut
// before a later entry keeps it and all after it (review of this session's
// change: the first version 2 frame was taken for entry INDEX's successor,
// and the repair refused).
func TestRepairTruncateBeforeMixedVersionsDamaged(t *testing.T) {
	for _, before := range []uint64{5, 10, 11, 12} {
		t.Run(fmt.Sprint("before=", before), func(t *testing.T) {
			dir, want := mixedLog(t, 1<<20, 10, 20)
			flipByte(t, tailPath(t, dir), 2) // entry 3
			if _, err := RepairTruncateBefore(dir, before, filepath.Join(t.TempDir(), "backup"), false); err != nil {
				t.Fatalf("cut before %d: %v", before, err)
			}
			checkRange(t, dir, want, before, 20).Close()
		})
	}
}

// A log of version 1 entries 1..20 whose entry 9's length prefix takes in
// entries 10 and 11: counting frames numbers the later ones wrong, and
// version 1 frames carry no index to tell. The cut before a later entry
// refuses; it kept misnumbered entries, or dropped 19 and 20 as past the
// log's end (found by review).
func TestRepairTruncateBeforeVersion1Swallowed(t *testing.T) {
	for _, before := range []uint64{12, 17, 19, 20} {
		t.Run(fmt.Sprint("before=", before), func(t *testing.T) {
			dir := t.TempDir()
			o := quietOpts()
			o.SegmentSize = 1 << 20
			l := mustOpen(t, dir, o)
			appendN(t, l, 1, 20)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			toVersion1(t, tailPath(t, dir))
			swallow(t, tailPath(t, dir), 8, 2)
			before0 := dirFiles(t, dir)
			if _, err := RepairTruncateBefore(dir, before, filepath.Join(t.TempDir(), "backup"), false); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cannot be located") {
				t.Fatalf("cut before %d: %v, want a refusal", before, err)
			}
			if !reflect.DeepEqual(dirFiles(t, dir), before0) {
				t.Fatal("the refused repair changed the log")
			}
		})
	}
}

// Damage that makes counting frames go wrong, where no frame carries an
// index to tell: the cut before INDEX refuses and changes nothing. Found
// by a randomized review of this session's change (each case kept entries
// under other numbers, or wrote a segment that could not be read).
func TestRepairTruncateBeforeRefusesWrongCounts(t *testing.T) {
	cases := []struct {
		name    string
		entries int
		segSize int
		v1      int // entries 1..v1 written as version 1 frames (older kvidx)
		index   uint64
		damage  func(t *testing.T, dir string)
	}{
		{"version 1, zeroed entries", 40, 1 << 20, 40, 20, func(t *testing.T, dir string) {
			path := tailPath(t, dir)
			data, _ := os.ReadFile(path)
			ends := entryEnds(t, inUse(data))
			clear(data[ends[1]:ends[3]]) // entries 3 and 4: zero bytes read as empty frames
			os.WriteFile(path, data, 0o640)
		}},
		{"version 1, length prefix one short", 40, 1 << 20, 40, 20, func(t *testing.T, dir string) {
			path := tailPath(t, dir)
			data, _ := os.ReadFile(path)
			data[entryEnds(t, inUse(data))[1]]-- // entry 3's prefix: its last byte reads as a frame
			os.WriteFile(path, data, 0o640)
		}},
		{"version 1, an entry gone from a segment before the last", 30, 300, 30, 5, func(t *testing.T, dir string) {
			segs, _ := listSegments(dir)
			path := filepath.Join(dir, segs[0].name)
			data, _ := os.ReadFile(path)
			ends := entryEnds(t, data)
			os.WriteFile(path, append(data[:ends[0]:ends[0]], data[ends[1]:]...), 0o640) // entry 2
		}},
		{"both versions, a version 1 entry twice", 20, 1 << 20, 10, 5, func(t *testing.T, dir string) {
			path := tailPath(t, dir)
			data, _ := os.ReadFile(path)
			ends := entryEnds(t, inUse(data))
			dup := append([]byte(nil), data[ends[0]:ends[1]]...) // entry 2
			os.WriteFile(path, append(append(data[:ends[1]:ends[1]], dup...), data[ends[1]:]...), 0o640)
		}},
		{"version 2, entry INDEX damaged at the end of a segment before the last", 30, 300, 0, 0, func(t *testing.T, dir string) {
			segs, _ := listSegments(dir)
			path := filepath.Join(dir, segs[0].name)
			data, _ := os.ReadFile(path)
			data[len(data)-1] ^= 0x20 // the segment's last entry
			os.WriteFile(path, data, 0o640)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := mixedLog(t, c.segSize, c.v1, c.entries)
			c.damage(t, dir)
			index := c.index
			if index == 0 { // the last entry of the first segment
				segs, _ := listSegments(dir)
				index = segs[1].index - 1
			}
			before := dirFiles(t, dir)
			if _, err := RepairTruncateBefore(dir, index, filepath.Join(t.TempDir(), "backup"), false); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("cut before %d: %v, want a refusal", index, err)
			}
			if !reflect.DeepEqual(dirFiles(t, dir), before) {
				t.Fatal("the refused repair changed the log")
			}
		})
	}
}

// mixedLog writes a log of entries 1..n in segments of segSize bytes, the
// first v1 of them as version 1 frames (as a kvidx before frames carried
// their index wrote them, and this one continued), and returns its
// directory and the entries' events.
func mixedLog(t *testing.T, segSize, v1, n int) (string, [][]engine.Event) {
	t.Helper()
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = segSize
	l := mustOpen(t, dir, o)
	want := appendN(t, l, 1, max(v1, 1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if v1 > 0 {
		segs, _ := listSegments(dir)
		for _, s := range segs {
			toVersion1(t, filepath.Join(dir, s.name))
		}
	}
	l = mustOpen(t, dir, o)
	want = append(want, appendN(t, l, max(v1, 1)+1, n)...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, want
}

// A segment before the last that is short, or missing, leaves entries
// tidwall/wal cannot find, and its TruncateFront panics on them. A
// truncation to one of them (retention after a snapshot) fails naming
// the segment, changes nothing, and leaves the log usable.
func TestTruncateFrontIntoMissingEntriesFails(t *testing.T) {
	for _, damage := range []string{"segment missing", "segment short"} {
		t.Run(damage, func(t *testing.T) {
			dir, want := buildLog(t, 40, 300)
			segs, _ := listSegments(dir)
			if len(segs) < 4 {
				t.Fatalf("want 4 segments or more, got %d", len(segs))
			}
			var target uint64
			if damage == "segment missing" {
				if err := os.Remove(filepath.Join(dir, segs[2].name)); err != nil {
					t.Fatal(err)
				}
				target = segs[2].index + 1
			} else {
				path := filepath.Join(dir, segs[1].name)
				data, _ := os.ReadFile(path)
				ends := entryEnds(t, data)
				if err := os.WriteFile(path, data[:ends[1]], 0o640); err != nil {
					t.Fatal(err)
				}
				target = segs[1].index + 3
			}
			before := dirFiles(t, dir)
			l := mustOpen(t, dir, nil)
			defer l.Close()
			err := l.TruncateFront(target)
			var ee *EntryError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ee) || ee.Entry != target || ee.Segment == "" {
				t.Fatalf("TruncateFront(%d) = %v, want an EntryError for entry %d naming its segment", target, err, target)
			}
			if first, _ := l.FirstIndex(); first != 1 {
				t.Fatalf("first index %d after the refused truncation, want 1", first)
			}
			for name := range before {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Fatalf("the refused truncation removed %s", name)
				}
			}
			// Still usable: reads, appends, and a truncation past the damage.
			if e, err := l.ReadEntry(1); err != nil || !reflect.DeepEqual(e.Events, normalize(want[0])) {
				t.Fatalf("read entry 1: %v", err)
			}
			if _, err := l.Append(context.Background(), []engine.Event{storedEvent(1, 1)}, nil); err != nil {
				t.Fatalf("append after the refused truncation: %v", err)
			}
			if err := l.TruncateFront(segs[3].index); err != nil {
				t.Fatalf("truncate past the damage: %v", err)
			}
		})
	}
}

// tidwall/wal renames a truncation's fsynced temporary file to its .START
// or .END name and removes the segments it replaces with no directory
// fsync between: a power loss may keep the removals and lose the rename,
// and the temporary file is then the only copy of acknowledged entries.
// Open keeps it (only a copy whose segment is still there is deleted), and
// renamed without .TEMP it finishes the truncation with every entry.
//
// A filesystem that may keep tidwall/wal's removals and lose its rename may
// as well keep the removal of the segment a front truncation copied from
// and lose that of a segment before it: a segment starting before the cut
// is then left, but not the one that held the entries the .START.TEMP file
// copied ("earlier segment left").
//
// When the cut was in the last segment, TAIL names a segment no longer
// there and Open refuses the log: the refusal names the kept file and the
// rename, so that nobody repairs (and cuts) first.
func TestOpenKeepsTruncationTempWhoseSegmentIsGone(t *testing.T) {
	const lastSeg = -1
	for _, tc := range []struct {
		name, kind string
		src        int    // the segment the file was copied from (lastSeg: the last one)
		gone       [2]int // segs[gone[0]:gone[1]] removed (gone[1] 0: to the end)
	}{
		{".START", ".START", 1, [2]int{0, 2}},
		{".START/earlier segment left", ".START", 2, [2]int{1, 3}},
		{".START/cut in the last segment", ".START", lastSeg, [2]int{0, 0}},
		{".END", ".END", 1, [2]int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			segs := segmentedLog(t, dir, 60)
			src := segs[(tc.src+len(segs))%len(segs)]
			data, err := os.ReadFile(filepath.Join(dir, src.name))
			if err != nil {
				t.Fatal(err)
			}
			// The cut keeps entry cut and what follows it in src (.START),
			// or what precedes it there (.END).
			cut := src.index + 1
			_, off, ok := nextEntry(data)
			if !ok {
				t.Fatalf("segment %s has no entry", src.name)
			}
			gone := segs[tc.gone[0]:]
			if tc.gone[1] > 0 {
				gone = segs[tc.gone[0]:tc.gone[1]]
			}
			// Every entry from the cut on is there once the truncation is
			// finished (.START), or every one before it (.END).
			name, kept, first, last := fmt.Sprintf("%020d.START.TEMP", cut), data[off:], cut, uint64(60)
			if tc.kind == ".END" {
				name, kept, first, last = src.name+".END.TEMP", data[:off], 1, cut-1
				// A directory TAIL does not check (an older kvidx's, or
				// its TAIL lost): nothing refuses the open before.
				if err := os.Remove(filepath.Join(dir, TailMarkName)); err != nil {
					t.Fatal(err)
				}
			}
			temp := filepath.Join(dir, name)
			if err := os.WriteFile(temp, kept, 0o640); err != nil {
				t.Fatal(err)
			}
			for _, s := range gone {
				if err := os.Remove(filepath.Join(dir, s.name)); err != nil {
					t.Fatal(err)
				}
			}
			o := quietOpts()
			o.SegmentSize = 256
			l, err := Open(dir, o)
			if err == nil {
				l.Close()
			}
			var mt *MissingTailError
			if errors.As(err, &mt) && !strings.Contains(err.Error(), "rename it "+strings.TrimSuffix(name, ".TEMP")) {
				t.Errorf("the refusal does not point at the kept %s: %v", name, err)
			}
			if tc.src == lastSeg && mt == nil {
				t.Errorf("open of a log without its newest segment: %v, want a MissingTailError", err)
			}
			got, err := os.ReadFile(temp)
			if err != nil {
				t.Fatalf("the only copy of entries was deleted by Open: %v", err)
			}
			if !bytes.Equal(got, kept) {
				t.Fatalf("%s changed by Open", name)
			}
			if err := os.Rename(temp, strings.TrimSuffix(temp, ".TEMP")); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, dir, o)
			defer l.Close()
			es := readAll(t, l, 0)
			if len(es) != int(last-first+1) || es[0].Index != first || es[len(es)-1].Index != last {
				t.Fatalf("%d entries after the truncation is finished, want %d..%d", len(es), first, last)
			}
		})
	}
}
