package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// TestDamagedKeySizeError: a leaf element of the places bucket whose key
// size is damaged (the key then runs over the rest of its page) is reported
// in an error of a few hundred bytes, not one holding the hex of that whole
// "key" (found by FuzzFile: 6 MB of error text, 100 MB allocated, from a
// 320 KiB file; a damaged key size in a large snapshot reached memory past
// the file).
func TestDamagedKeySizeError(t *testing.T) {
	ix := bigIndex(rand.New(rand.NewPCG(3, 4)), 6, 8)
	base, err := os.ReadFile(writeSnap(t, t.TempDir(), ix, 1, WithChunkBytes(256)))
	if err != nil {
		t.Fatal(err)
	}
	elem, pageEnd := firstChunkElement(t, base)
	// The longest key the element can have within its page: the key then
	// runs over the rest of the page.
	key := elem + int(binary.LittleEndian.Uint32(base[elem+4:]))
	ksize := uint32(pageEnd - key - int(binary.LittleEndian.Uint32(base[elem+12:])))
	all := func(*engine.PlaceRecord) bool { return true }
	for _, tc := range []struct {
		name   string
		bucket bool // the element also flagged as a nested bucket
		read   func(r *Reader) error
	}{
		{"full Scan", false, func(r *Reader) error {
			return r.Scan(context.Background(), 0, math.MaxUint32, nil, all)
		}},
		{"Scan of a range", false, func(r *Reader) error { return r.Scan(context.Background(), 1, 3, nil, all) }},
		{"Verify", false, func(r *Reader) error { return r.Verify(context.Background()) }},
		{"Verify, nested bucket", true, func(r *Reader) error { return r.Verify(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), base...)
			binary.LittleEndian.PutUint32(b[elem+8:], ksize)
			if tc.bucket {
				binary.LittleEndian.PutUint32(b[elem:], 1)
			}
			p := filepath.Join(t.TempDir(), FileName(1))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := Open(p)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer r.Close()
			err = tc.read(r)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%v, want ErrCorrupt", err)
			}
			if msg := err.Error(); len(msg) > 512 {
				t.Fatalf("error of %d bytes: %.200s...", len(msg), msg)
			}
		})
	}
}

// rootPageOffset returns where the root bucket's page starts in a snapshot
// file: the live meta (the higher txid of pages 0 and 1) names it.
func rootPageOffset(b []byte) int {
	pageSize := int(binary.LittleEndian.Uint32(b[16+8:]))
	meta := 16
	if binary.LittleEndian.Uint64(b[pageSize+64:]) > binary.LittleEndian.Uint64(b[64:]) {
		meta += pageSize
	}
	return int(binary.LittleEndian.Uint64(b[meta+16:])) * pageSize
}

// TestDamagedRootValueSize: a flipped high bit of the value size of one of
// the root bucket's elements (the meta, workers and places buckets) is
// refused by Open and Load without allocating what it declares (bbolt
// copies an unaligned bucket value whole: FuzzFile found 1.5 GB allocated
// for a 320 KiB file).
func TestDamagedRootValueSize(t *testing.T) {
	ix := bigIndex(rand.New(rand.NewPCG(3, 4)), 6, 8)
	base, err := os.ReadFile(writeSnap(t, t.TempDir(), ix, 1, WithChunkBytes(256)))
	if err != nil {
		t.Fatal(err)
	}
	root := rootPageOffset(base)
	if n := binary.LittleEndian.Uint16(base[root+10:]); n != 3 {
		t.Fatalf("root page of %d elements, want 3", n)
	}
	for _, tc := range []struct {
		name string
		elem int
		bits byte // XORed into the value size's high byte
	}{
		{"meta, 0x30", 0, 0x30},
		{"places, 0x30", 1, 0x30},
		{"workers, 0x30", 2, 0x30},
		{"meta, 0xf0", 0, 0xf0},
		{"places, 0x01", 1, 0x01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), base...)
			b[root+16+16*tc.elem+15] ^= tc.bits
			p := filepath.Join(t.TempDir(), FileName(1))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, lerr := Load(context.Background(), p)
			r, oerr := Open(p)
			if oerr == nil {
				r.Close()
			}
			runtime.ReadMemStats(&after)
			for _, err := range []error{lerr, oerr} {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%v, want ErrCorrupt", err)
				}
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Fatalf("%d bytes allocated refusing a %d-byte file", grew, len(b))
			}
		})
	}
}

// firstChunkElement returns where the leaf element of the first chunk
// starts in a small snapshot file, whose places bucket is inline, and where
// that bucket's page ends.
func firstChunkElement(t *testing.T, b []byte) (elem, pageEnd int) {
	t.Helper()
	root := rootPageOffset(b)
	elem = -1
	for i := range int(binary.LittleEndian.Uint16(b[root+10:])) {
		e := root + 16 + 16*i
		k := e + int(binary.LittleEndian.Uint32(b[e+4:]))
		if string(b[k:k+int(binary.LittleEndian.Uint32(b[e+8:]))]) == string(bucketPlaces) {
			inline := k + len(bucketPlaces) + 16
			if binary.LittleEndian.Uint16(b[inline+10:]) < 2 {
				t.Fatal("places bucket of fewer than 2 chunks")
			}
			elem = inline + 16
			pageEnd = k + len(bucketPlaces) + int(binary.LittleEndian.Uint32(b[e+12:]))
		}
	}
	if elem < 0 || binary.LittleEndian.Uint32(b[elem+8:]) != 8 {
		t.Fatalf("no inline places bucket of chunks found (element at %d)", elem)
	}
	return elem, pageEnd
}

// TestElementPastFile: a chunk's leaf element whose key position, key size
// or value size reaches past the file is refused by Open, before anything
// reads it: reading such a key ran into memory of the Go heap, and a
// checksum over it crashed the process ("found bad pointer in Go heap",
// found by FuzzFile), where recovery must fall back to an older snapshot.
func TestElementPastFile(t *testing.T) {
	ix := bigIndex(rand.New(rand.NewPCG(3, 4)), 6, 8)
	base, err := os.ReadFile(writeSnap(t, t.TempDir(), ix, 1, WithChunkBytes(256)))
	if err != nil {
		t.Fatal(err)
	}
	elem, _ := firstChunkElement(t, base)
	for _, tc := range []struct {
		name  string
		field int // byte offset in the element: 4 pos, 8 key size, 12 value size
		value uint32
	}{
		{"key size 3 MiB", 8, 3 << 20},
		{"key size 4 GiB", 8, math.MaxUint32},
		{"value size 3 MiB", 12, 3 << 20},
		{"key position 3 MiB", 4, 3 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), base...)
			binary.LittleEndian.PutUint32(b[elem+tc.field:], tc.value)
			p := filepath.Join(t.TempDir(), FileName(1))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := Open(p)
			if err == nil {
				r.Close()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "element 0 reaches byte") {
				t.Fatalf("Open: %v, want the element refused", err)
			}
			if _, _, err := Load(context.Background(), p); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load: %v, want ErrCorrupt", err)
			}
		})
	}
}
