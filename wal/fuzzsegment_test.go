package wal

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// FuzzSegment: a real small log whose segment `which` (modulo their count)
// is replaced by the fuzz input is read by Inspect, Scan and Open (then
// every entry read) with errors or entries, never a panic, a hang or a
// huge allocation; and what Inspect says a restart would recover is what
// Open recovers.
func FuzzSegment(f *testing.F) {
	base := f.TempDir()
	o := quietOpts()
	o.SegmentSize = 200
	l, err := Open(base, o)
	if err != nil {
		f.Fatal(err)
	}
	for i := range 12 {
		evs := []engine.Event{storedEvent(uint64(i), uint64(i))}
		if i%2 == 1 {
			evs = append(evs, engine.Event{Worker: engine.WorkerKey{WorkerID: 9}, Kind: engine.KindRemoved, BlockHashes: []uint64{1, 2, 3}})
		}
		if _, err := l.Append(context.Background(), evs, []Position{{"p", uint64(i)}}); err != nil {
			f.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	segs, err := listSegments(base)
	if err != nil || len(segs) < 2 {
		f.Fatalf("segments %v, %v", segs, err)
	}
	files := map[string][]byte{}
	ents, err := os.ReadDir(base)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(base, e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			files[e.Name()] = b
		}
	}
	for i, s := range segs {
		b := files[s.name]
		f.Add(uint8(i), b)
		f.Add(uint8(i), b[:len(b)/2])
		c := append([]byte(nil), b...)
		c[len(c)/3] ^= 0x40
		f.Add(uint8(i), c)
	}
	work := f.TempDir()
	f.Fuzz(func(t *testing.T, which uint8, seg []byte) {
		dir, err := os.MkdirTemp(work, "wal")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		target := segs[int(which)%len(segs)].name
		if err := os.WriteFile(filepath.Join(dir, target), seg, 0o644); err != nil {
			t.Fatal(err)
		}
		hang := time.AfterFunc(20*time.Second, func() { panic("WAL reading hangs on fuzz input") })
		defer hang.Stop()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		Frames(seg)
		ValidPrefix(seg, 1)
		StrayBytes(seg, 1, 3)
		lay, inspectErr := Inspect(dir)
		Scan(dir, 0, 0, func(Entry) error { return nil })
		Scan(dir, 2, 3, func(Entry) error { return nil })
		l, err := Open(dir, o)
		if err == nil {
			last, lerr := l.LastIndex()
			for _, err := range l.Entries(0) {
				if err != nil {
					break
				}
			}
			if cerr := l.Close(); cerr != nil {
				t.Fatalf("close: %v", cerr)
			}
			if inspectErr == nil && lerr == nil && last != lay.LastIndex {
				t.Fatalf("Inspect says the last index is %d, Open recovers %d", lay.LastIndex, last)
			}
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 100<<20 {
			t.Fatalf("%d bytes allocated reading a %d-byte segment", grew, len(seg))
		}
	})
}
