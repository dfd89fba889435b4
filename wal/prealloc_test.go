package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
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
// read-only walk of the live directory sees the fill as unused space.
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
	if good, _ := scanValid(data, segmentFirst(t, tail)); good != len(data) {
		t.Fatalf("closed log's tail segment: %d bytes of entries, then %d more", good, len(data)-good)
	}
	l = mustOpen(t, dir, o)
	want = append(want, appendN(t, l, 21, 30)...)
	l.Close()
	checkPrefix(t, dir, want, 30).Close()
}

// crashedLog appends entries 1..n to a log of 64 KiB segments and returns
// a copy of its directory as a kill -9 would leave it (the tail segment
// still filled), with the entries' events.
func crashedLog(t *testing.T, n int) (string, [][]engine.Event) {
	t.Helper()
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 64 << 10
	l := mustOpen(t, dir, o)
	want := appendN(t, l, 1, n)
	crashed := cloneDir(t, dir)
	l.Close()
	return crashed, want
}

// A writer that stops without closing leaves the fill: the next Open
// trims them without calling them torn, and appends go on at the right
// place.
func TestCrashWithPreallocatedTail(t *testing.T) {
	crashed, want := crashedLog(t, 10)
	o := quietOpts()
	o.SegmentSize = 64 << 10
	l := mustOpen(t, crashed, o)
	if got := l.Stats().TornBytesDropped; got != 0 {
		t.Fatalf("open after a crash dropped %d torn bytes, want 0", got)
	}
	want = append(want, appendN(t, l, 11, 15)...)
	l.Close()
	checkPrefix(t, crashed, want, 15).Close()
}

// Fill after the last entry is unused space: Open trims it quietly.
func TestFillTailTrimmed(t *testing.T) {
	src, want := buildLog(t, 3, 1<<20)
	tail := tailPath(t, src)
	before, _ := os.ReadFile(tail)
	os.WriteFile(tail, append(bytes.Clone(before), bytes.Repeat([]byte{fillByte}, 5000)...), 0o640)
	l := checkPrefix(t, src, want, 3)
	if got := l.Stats().TornBytesDropped; got != 0 {
		t.Fatalf("dropped %d torn bytes, want 0", got)
	}
	l.Close()
	if after, _ := os.ReadFile(tail); !bytes.Equal(after, before) {
		t.Fatalf("tail segment after open and close: %d bytes, want its %d bytes of entries", len(after), len(before))
	}
}

// An entry torn in the preallocated space (its first bytes written, the
// rest still fill) is a torn tail, cut and counted, at every length it can
// be torn at.
func TestTornEntryInPreallocatedSpace(t *testing.T) {
	src, want := buildLog(t, 4, 1<<20)
	tail := tailPath(t, src)
	data, _ := os.ReadFile(tail)
	ends := entryEnds(t, data)
	kept := ends[len(ends)-2] // the last entry is the one torn
	const seg = 1 << 16
	for cut := kept + 1; cut < len(data); cut++ {
		if fillRun(data[cut:]) == len(data)-cut {
			continue // the fill put back what was cut: the entry is whole
		}
		dir := cloneDir(t, src)
		b := bytes.Repeat([]byte{fillByte}, seg)
		copy(b, data[:cut])
		path := filepath.Join(dir, filepath.Base(tail))
		os.WriteFile(path, b, 0o640)
		l := checkPrefix(t, dir, want, 3)
		if got := l.Stats().TornBytesDropped; got <= 0 {
			t.Fatalf("torn at %d: dropped %d bytes, want some", cut, got)
		}
		l.Close()
		if got := fileSize(t, path); got != int64(kept) {
			t.Fatalf("torn at %d: segment cut to %d bytes, want %d", cut, got, kept)
		}
	}
}

// Entries zeroed in place (a lost write) are not the writer's fill: a torn
// tail, cut, logged and counted.
func TestZeroedLastEntriesAreCounted(t *testing.T) {
	src, want := buildLog(t, 6, 1<<20)
	tail := tailPath(t, src)
	data, _ := os.ReadFile(tail)
	ends := entryEnds(t, data)
	clear(data[ends[3]:]) // entries 5 and 6
	os.WriteFile(tail, data, 0o640)
	l := checkPrefix(t, src, want, 4)
	defer l.Close()
	if got := l.Stats().TornBytesDropped; got != int64(len(data)-ends[3]) {
		t.Fatalf("TornBytesDropped = %d, want %d", got, len(data)-ends[3])
	}
}

// liveImages returns a preallocated tail segment as it is after entries
// 1..10 and after entries 1..1000, and the end of entry 10.
func liveImages(t *testing.T) (dir, tail string, before, after []byte, good int) {
	t.Helper()
	dir = t.TempDir()
	o := quietOpts()
	o.SegmentSize = 64 << 10
	l := mustOpen(t, dir, o)
	defer l.Close()
	appendN(t, l, 1, 10)
	tail = tailPath(t, dir)
	before, _ = os.ReadFile(tail)
	good, _ = scanValid(before, segmentFirst(t, tail))
	appendN(t, l, 11, 1000)
	after, _ = os.ReadFile(tail)
	return dir, tail, before, after, good
}

// pageBytes is the unit in which a power loss keeps or loses written data.
const pageBytes = 4096

// A power loss can keep an older page of the preallocated tail under newer
// ones: a hole of fill, then valid entries. Open refuses it like damage
// inside the log (a hole can also be a page a failed fsync left stale,
// under entries acknowledged since), and so does a read of the image.
func TestHoleOfFillRefused(t *testing.T) {
	_, tail, before, after, good := liveImages(t)
	// The page where entry 10 ends kept its older contents.
	p := good / pageBytes * pageBytes
	older := append(append(append([]byte{}, after[:p]...), before[p:p+pageBytes]...), after[p+pageBytes:]...)
	// A whole page further on was lost.
	lostAt := (good/pageBytes + 1) * pageBytes
	if used := len(inUse(after)); lostAt+2*pageBytes > used {
		t.Fatalf("entries end at %d: no whole page between two others after %d", used, good)
	}
	lost := bytes.Clone(after)
	copy(lost[lostAt:lostAt+pageBytes], bytes.Repeat([]byte{fillByte}, pageBytes))
	for name, img := range map[string][]byte{"older page": older, "lost page": lost} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, filepath.Base(tail)), img, 0o640)
			var de *DamageError
			if _, err := Inspect(dir); !errors.As(err, &de) {
				t.Fatalf("inspect: %v, want a DamageError", err)
			}
			if _, err := Open(dir, quietOpts()); !errors.As(err, &de) {
				t.Fatalf("open: %v, want a DamageError", err)
			}
		})
	}
}

// runEvent is one event whose encoding ends in ~4.7 KiB of fill bytes near
// the end of snappy's 64 KiB block, where the encoder, its lookup step
// grown over random data, leaves the run as a literal: the entry's frame
// holds the run as it is.
func runEvent() engine.Event {
	r := rand.New(rand.NewPCG(3, 4))
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, EventID: 1, Kind: engine.KindStored}
	for range 3800 {
		ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: r.Uint64(), TokensHash: r.Uint64()})
	}
	const f = 0xA5A5A5A5A5A5A5A5
	for range 296 {
		ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: f, TokensHash: f})
	}
	return ev
}

// An acknowledged entry holding a page-aligned page of fill, damaged later
// and followed by acknowledged entries, is damage inside the log.
func TestDamagedEntryWithFillPageRefused(t *testing.T) {
	ctx := context.Background()
	for pad := range 300 {
		dir := t.TempDir()
		l := mustOpen(t, dir, quietOpts())
		appendN(t, l, 1, pad)
		big, err := l.Append(ctx, []engine.Event{runEvent()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, int(big)+1, int(big)+5)
		l.Close()
		tail := tailPath(t, dir)
		data, _ := os.ReadFile(tail)
		ends := entryEnds(t, data)
		start, end := 0, ends[big-1]
		if big > 1 {
			start = ends[big-2]
		}
		page := false
		for a := (start + pageBytes - 1) / pageBytes * pageBytes; a+pageBytes <= end; a += pageBytes {
			page = page || fillRun(data[a:a+pageBytes]) == pageBytes
		}
		if !page {
			continue // another alignment of the entry in the file
		}
		data[start+3] ^= 0x40 // the entry's CRC
		os.WriteFile(tail, data, 0o640)
		var de *DamageError
		if _, err := Open(dir, quietOpts()); !errors.As(err, &de) || de.Entry != big {
			t.Fatalf("pad %d: open: %v, want damage at entry %d", pad, err, big)
		}
		return
	}
	t.Fatal("no padding put a page-aligned page of fill inside the entry")
}

// Damage inside a crashed writer's log is still refused, and the fill after
// it is not read as entries by the walk or by the operator's cuts.
func TestDamageBeforeFillRefused(t *testing.T) {
	crashed, _ := crashedLog(t, 10)
	tail := tailPath(t, crashed)
	data, _ := os.ReadFile(tail)
	ends := entryEnds(t, inUse(data))
	data[ends[4]-1] ^= 1 // entry 5 fails its CRC; entries 6..10 are valid
	os.WriteFile(tail, data, 0o640)

	lay, err := Inspect(crashed)
	var de *DamageError
	if !errors.As(err, &de) || de.Entry != 5 {
		t.Fatalf("inspect: %v, want damage at entry 5", err)
	}
	if len(lay.Damage) > 1 || lay.Segments[0].Entries != 10 {
		t.Fatalf("inspect: %d damage records (want 1), segment entries %d (want 10)", len(lay.Damage), lay.Segments[0].Entries)
	}
	if _, err := Open(crashed, quietOpts()); !errors.As(err, &de) || de.Entry != 5 {
		t.Fatalf("open: %v, want damage at entry 5", err)
	}
	if err := RepairTruncateAfter(crashed, 20, t.TempDir()); !errors.Is(err, ErrNothingToCut) {
		t.Fatalf("cut after 20 of a 10-entry log: %v, want ErrNothingToCut", err)
	}
}

// syncedStore records the file each fsync of entries covers.
type syncedStore struct {
	Store
	l      **Log
	synced *[]string
}

func (s syncedStore) Sync() error {
	*s.synced = append(*s.synced, filepath.Base((*s.l).tailFile.Name())) // fdMu is held
	return s.Store.Sync()
}

// After a TruncateFront that leaves the (preallocated) tail segment alone,
// every acknowledged entry is still fsynced in the file that holds it.
func TestTruncateFrontKeepsSyncOnTail(t *testing.T) {
	dir := t.TempDir()
	o := quietOpts()
	o.SegmentSize = 4 << 10
	var l *Log
	var synced []string
	o.WrapStore = func(s Store) Store { return syncedStore{Store: s, l: &l, synced: &synced} }
	l = mustOpen(t, dir, o)
	defer l.Close()
	i := 1
	for ; ; i++ {
		appendN(t, l, i, i)
		if segs, _ := listSegments(dir); len(segs) >= 3 {
			break
		}
	}
	appendN(t, l, i+1, i+40) // the tail segment holds entries
	i += 40
	// The cut lies in the first segment: tidwall/wal leaves the tail as it is.
	if err := l.TruncateFront(2); err != nil {
		t.Fatal(err)
	}
	for range 400 {
		i++
		synced = synced[:0]
		appendN(t, l, i, i)
		segs, _ := listSegments(dir)
		last := segs[len(segs)-1].name
		if seg, _ := locate(dir, uint64(i)); seg == last && (len(synced) == 0 || synced[len(synced)-1] != last) {
			t.Fatalf("entry %d acknowledged in segment %s, but the fsyncs covered %v", i, last, synced)
		}
	}
}

// Segments other than the last never end in fill, across rollovers and
// truncations of the front (tidwall/wal reads them whole, and would read
// fill as a broken entry).
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
		if good, _ := scanValid(data, s.index); good != len(data) {
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

// The operator's cuts count entries, not fill, in a crashed writer's tail.
func TestRepairIgnoresUnusedSpace(t *testing.T) {
	crashed, want := crashedLog(t, 6)
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

// Fill after a torn entry's length and version byte never passes as its
// CRC and data (see fillByte).
func TestFillCompletesNoFrame(t *testing.T) {
	fill := [4]byte{fillByte, fillByte, fillByte, fillByte}
	want := binary.LittleEndian.Uint32(fill[:])
	crc := uint32(0)
	one := []byte{fillByte}
	for k := 0; k <= 1<<20; k++ {
		if crc == want {
			t.Fatalf("the CRC-32C of %d fill bytes is four fill bytes", k)
		}
		crc = crc32.Update(crc, castagnoli, one)
	}
}

// segmentFirst returns the index of the first entry of the segment file at
// path, from its name.
func segmentFirst(t *testing.T, path string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(filepath.Base(path)[:20], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
