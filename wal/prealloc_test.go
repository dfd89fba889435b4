package wal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// appendN appends entries from..to (entry i: a stored event of worker i)
// and returns their events, want[i-from] being entry i's.
func appendN(t *testing.T, l *Log, from, to int) [][]engine.Event {
	t.Helper()
	var want [][]engine.Event
	for i := from; i <= to; i++ {
		evs := []engine.Event{storedEvent(uint64(i), uint64(i))}
		idx, err := l.Append(context.Background(), evs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if idx != uint64(i) {
			t.Fatalf("entry %d appended at index %d", i, idx)
		}
		want = append(want, evs)
	}
	return want
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// The tail segment is preallocated while the log is open and trimmed by
// Close; entries before and after a reopen read back in order, and the
// read-only walk of the live directory sees the zeros as unused space.
func TestTailPreallocatedWhileOpen(t *testing.T) {
	const seg = 64 << 10
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = seg
	l := mustOpen(t, dir, o)
	want := appendN(t, l, 1, 20)
	tail := tailPath(t, dir)
	if got := fileSize(t, tail); got != seg {
		t.Fatalf("open log's tail segment is %d bytes, want %d (preallocated)", got, seg)
	}
	lay, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if lay.TornBytes != 0 || lay.UnusedBytes == 0 || lay.Entries != 20 || lay.LastIndex != 20 || len(lay.Damage) != 0 {
		t.Fatalf("live layout: torn %d, unused %d, entries %d, last %d, damage %v", lay.TornBytes, lay.UnusedBytes, lay.Entries, lay.LastIndex, lay.Damage)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(tail)
	if good, _ := scanValid(data); good != len(data) {
		t.Fatalf("closed log's tail segment: %d bytes of entries, then %d more", good, len(data)-good)
	}
	l = mustOpen(t, dir, o)
	want = append(want, appendN(t, l, 21, 30)...)
	l.Close()
	checkPrefix(t, dir, want, 30).Close()
}

// A writer that stops without closing leaves the zeros: the next Open
// trims them without calling them torn, and appends go on at the right
// place.
func TestCrashWithPreallocatedTail(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 64 << 10
	l := mustOpen(t, dir, o)
	want := appendN(t, l, 1, 10)
	crashed := cloneDir(t, dir) // the files as a kill -9 leaves them
	l.Close()
	os.Remove(filepath.Join(crashed, LockFileName))

	l = mustOpen(t, crashed, o)
	if got := l.Stats().TornBytesDropped; got != 0 {
		t.Fatalf("open after a crash dropped %d torn bytes, want 0", got)
	}
	want = append(want, appendN(t, l, 11, 15)...)
	l.Close()
	checkPrefix(t, crashed, want, 15).Close()
}

// An entry torn in the preallocated space (its first bytes written, the
// rest still zeros) is a torn tail, cut and counted with the zeros after
// it, at every length it can be torn at.
func TestTornEntryInPreallocatedSpace(t *testing.T) {
	src, want := buildLog(t, 4, 1<<20)
	tail := tailPath(t, src)
	data, _ := os.ReadFile(tail)
	ends := entryEnds(t, data)
	kept := ends[len(ends)-2] // the last entry is the one torn
	const seg = 1 << 16
	for cut := kept + 1; cut < len(data); cut++ {
		if allZero(data[cut:]) {
			continue // the zeros put back what was cut: the entry is whole
		}
		dir := cloneDir(t, src)
		b := make([]byte, seg)
		copy(b, data[:cut])
		os.WriteFile(filepath.Join(dir, filepath.Base(tail)), b, 0o640)
		l := checkPrefix(t, dir, want, 3)
		if got := l.Stats().TornBytesDropped; got != int64(seg-kept) {
			t.Fatalf("torn at %d: dropped %d bytes, want %d", cut, got, seg-kept)
		}
		l.Close()
	}
}

// Segments other than the last never end in zeros, across rollovers and
// truncations of the front (tidwall/wal reads them whole, and would read
// zeros as empty entries).
func TestOnlyTheTailIsPreallocated(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 1 << 10
	l := mustOpen(t, dir, o)
	want := appendN(t, l, 1, 200)
	segs, _ := listSegments(dir)
	if len(segs) < 5 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		data, _ := os.ReadFile(filepath.Join(dir, s.name))
		if good, _ := scanValid(data); good != len(data) {
			t.Fatalf("segment %s: %d bytes of entries, then %d more", s.name, good, len(data)-good)
		}
	}
	// Truncating into the tail segment rewrites it; it is preallocated again.
	if err := l.TruncateFront(200); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, tailPath(t, dir)); got != 1<<10 {
		t.Fatalf("tail after TruncateFront: %d bytes, want %d", got, 1<<10)
	}
	want = append(want, appendN(t, l, 201, 230)...)
	l.Close()
	checkRange(t, dir, want, 200, 230).Close()
}

// The operator's cuts count entries, not zeros, in a crashed writer's tail.
func TestRepairIgnoresUnusedSpace(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 64 << 10
	l := mustOpen(t, dir, o)
	want := appendN(t, l, 1, 6)
	crashed := cloneDir(t, dir)
	l.Close()
	os.Remove(filepath.Join(crashed, LockFileName))

	if err := RepairTruncateAfter(crashed, 6, t.TempDir()); !errors.Is(err, ErrNothingToCut) {
		t.Fatalf("cut after the last entry: %v, want ErrNothingToCut", err)
	}
	if err := RepairTruncateAfter(crashed, 7, t.TempDir()); !errors.Is(err, ErrNothingToCut) {
		t.Fatalf("cut past the last entry: %v, want ErrNothingToCut", err)
	}
	if err := RepairTruncateAfter(crashed, 4, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	checkPrefix(t, crashed, want, 4).Close()
}
