package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// TestDamagedKeySizeError: a leaf element of the places bucket whose key
// size is damaged (the key then runs over the rest of the file) is reported
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
	// The live meta (the higher txid of pages 0 and 1) names the root
	// bucket's page; its leaf holds the places bucket, inline (a bucket
	// header, then a page of the chunks).
	pageSize := int(binary.LittleEndian.Uint32(base[16+8:]))
	meta := 16
	if binary.LittleEndian.Uint64(base[pageSize+64:]) > binary.LittleEndian.Uint64(base[64:]) {
		meta += pageSize
	}
	root := int(binary.LittleEndian.Uint64(base[meta+16:])) * pageSize
	elem := -1
	for i := range int(binary.LittleEndian.Uint16(base[root+10:])) {
		e := root + 16 + 16*i
		k := e + int(binary.LittleEndian.Uint32(base[e+4:]))
		if string(base[k:k+int(binary.LittleEndian.Uint32(base[e+8:]))]) == string(bucketPlaces) {
			inline := k + len(bucketPlaces) + 16
			if binary.LittleEndian.Uint16(base[inline+10:]) < 2 {
				t.Fatal("places bucket of fewer than 2 chunks")
			}
			elem = inline + 16
		}
	}
	if elem < 0 || binary.LittleEndian.Uint32(base[elem+8:]) != 8 {
		t.Fatalf("no inline places bucket of chunks found (element at %d)", elem)
	}
	key := elem + int(binary.LittleEndian.Uint32(base[elem+4:]))
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
			binary.LittleEndian.PutUint32(b[elem+8:], uint32(len(b)-key-64))
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
