package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvidx/kvidx/engine"
)

// checkBad loads b from a file and requires a clean ErrCorrupt naming the
// file, or (when !mustFail) an index equal to want.
func checkBad(t *testing.T, what string, b []byte, mustFail bool, want *engine.Index, qs [][]uint64) {
	t.Helper()
	p := filepath.Join(t.TempDir(), FileName(9))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, _, err := Load(context.Background(), p)
	if err == nil {
		if mustFail {
			t.Fatalf("%s: loaded without error", what)
		}
		sameIndex(t, got, want, qs)
		return
	}
	msg := err.Error()
	if !errors.Is(err, ErrCorrupt) || !strings.HasPrefix(msg, "snapshot "+p+": ") || strings.Contains(msg, "goroutine ") {
		t.Fatalf("%s: error %q is not a clean corrupt-snapshot error", what, msg)
	}
	// A scan of every position (kvidx inspect summary, entries, diff)
	// reads every chunk, so it must find what Load found once it can open
	// the file (it passed a flip that still decoded: no data checksum).
	r, err := Open(p)
	if err != nil {
		return
	}
	defer r.Close()
	if err := r.Scan(context.Background(), 0, math.MaxUint32, nil, func(*engine.PlaceRecord) bool { return true }); err == nil {
		t.Fatalf("%s: Load fails (%s) but a full Scan passes", what, msg)
	} else if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: full Scan: %v, want ErrCorrupt", what, err)
	}
}

func corruptFixture(t *testing.T) (*engine.Index, []byte, [][]uint64) {
	rng := rand.New(rand.NewPCG(5, 5))
	ix := bigIndex(rng, 80, 40)
	p := writeSnap(t, t.TempDir(), ix, 9, WithChunkBytes(3000))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return ix, b, queries(rng)[:100]
}

func TestTruncated(t *testing.T) {
	ix, b, qs := corruptFixture(t)
	n := len(b)
	if n < 8*pageSize {
		t.Fatalf("fixture of %d bytes", n)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	offs := []int{0, 1, 100, pageSize, 2*pageSize - 1, 2 * pageSize, 3 * pageSize, 4 * pageSize, n / 2, n - pageSize - 17, n - pageSize, n - 1}
	for range 10 {
		// Cuts at a 4 KiB boundary pass the size check (files of version 1
		// and 2 have 4 KiB pages) and must be caught after it.
		offs = append(offs, rng.IntN(n), pageSize*rng.IntN(n/pageSize), minPageSize*rng.IntN(n/minPageSize))
	}
	for _, off := range offs {
		checkBad(t, "truncated at "+itoa(off), b[:off], true, ix, qs)
	}
	// Zeroed tail (a file whose last pages never reached the disk).
	z := bytes.Clone(b)
	clear(z[n-pageSize:])
	checkBad(t, "zeroed last page", z, false, ix, qs)
}

func TestBitFlips(t *testing.T) {
	ix, b, qs := corruptFixture(t)
	// Flips inside chunk values (the data) must all be caught.
	var vals [][]byte
	db, err := bolt.Open(writeTemp(t, b), 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPlaces).ForEach(func(k, v []byte) error {
			vals = append(vals, bytes.Clone(v))
			return nil
		})
	})
	db.Close()
	if len(vals) < 3 {
		t.Fatalf("fixture has %d chunks", len(vals))
	}
	rng := rand.New(rand.NewPCG(2, 2))
	found := 0
	for i, v := range vals {
		at := bytes.Index(b, v)
		if at < 0 {
			continue // spread over non-contiguous pages; covered below
		}
		found++
		for range 3 {
			off := at + rng.IntN(len(v))
			c := bytes.Clone(b)
			c[off] ^= 1 << rng.IntN(8)
			checkBad(t, "flip in chunk "+itoa(i)+" at "+itoa(off), c, true, ix, qs)
		}
	}
	if found < 3 {
		t.Fatalf("only %d of %d chunk values found in the file", found, len(vals))
	}
	// Flips anywhere: an error or an unchanged index, never a panic.
	for range 150 {
		off := rng.IntN(len(b))
		c := bytes.Clone(b)
		c[off] ^= 1 << rng.IntN(8)
		checkBad(t, "flip at "+itoa(off), c, false, ix, qs)
	}
	// Flips in each meta page (bbolt checksums those and falls back to the
	// other one, which predates the meta bucket's contents).
	failed := 0
	for page := range 2 {
		for _, off := range []int{page*pageSize + 20, page*pageSize + 40, page*pageSize + 60} {
			c := bytes.Clone(b)
			c[off] ^= 0x10
			p := writeTemp(t, c)
			if _, _, err := Load(context.Background(), p); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("meta flip at %d: %v", off, err)
				}
				failed++
			}
		}
	}
	if failed == 0 {
		t.Fatal("no flip of a meta page was caught")
	}
	// Both meta pages broken.
	c := bytes.Clone(b)
	c[20] ^= 1
	c[pageSize+20] ^= 1
	checkBad(t, "both meta pages", c, true, ix, qs)
}

func writeTemp(t *testing.T, b []byte) string {
	p := filepath.Join(t.TempDir(), FileName(9))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// editMeta rewrites meta keys of a copy of the file with bbolt.
func editMeta(t *testing.T, b []byte, edit func(mb *bolt.Bucket) error) []byte {
	p := writeTemp(t, b)
	db, err := bolt.Open(p, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return edit(tx.Bucket(bucketMeta)) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	out, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBadMeta(t *testing.T) {
	ix, b, qs := corruptFixture(t)
	u32 := func(x uint32) []byte { return binary.BigEndian.AppendUint32(nil, x) }
	cases := []struct {
		name, want string
		edit       func(mb *bolt.Bucket) error
	}{
		{"newer version", "unknown format version 3 (this build reads 1 to 2)", func(mb *bolt.Bucket) error { return mb.Put([]byte(metaFormat), u32(FormatVersion+1)) }},
		{"version 0", "unknown format version 0 (this build reads 1 to 2)", func(mb *bolt.Bucket) error { return mb.Put([]byte(metaFormat), u32(0)) }},
		{"missing key", "meta incomplete: no entries", func(mb *bolt.Bucket) error { return mb.Delete([]byte(metaEntries)) }},
		{"edited count", "meta checksum mismatch", func(mb *bolt.Bucket) error {
			return mb.Put([]byte(metaEntries), binary.BigEndian.AppendUint64(nil, 3))
		}},
		{"no meta", "no meta bucket", func(mb *bolt.Bucket) error { return mb.Tx().DeleteBucket(bucketMeta) }},
	}
	for _, c := range cases {
		bad := editMeta(t, b, c.edit)
		p := writeTemp(t, bad)
		_, _, err := Load(context.Background(), p)
		if !errors.Is(err, ErrCorrupt) || err.Error() != "snapshot "+p+": "+c.want {
			t.Fatalf("%s: %v", c.name, err)
		}
		// Its meta checksum fails: damaged, not another build's file.
		if errors.Is(err, ErrIncompatible) {
			t.Fatalf("%s: %v matches ErrIncompatible", c.name, err)
		}
		checkBad(t, c.name, bad, true, ix, qs)
	}
	// Meta consistent but the data checksum differs.
	bad := editMeta(t, b, func(mb *bolt.Bucket) error {
		return resealMeta(mb, metaChecksum, func(v []byte) []byte { return u32(binary.BigEndian.Uint32(v) + 1) })
	})
	p := writeTemp(t, bad)
	if _, _, err := Load(context.Background(), p); err == nil || err.Error() != "snapshot "+p+": data checksum mismatch" {
		t.Fatalf("data checksum: %v", err)
	}
}

// resealMeta replaces meta key k's value v with edit(v) and recomputes the
// meta checksum, so that the meta is consistent and only what it says is
// wrong.
func resealMeta(mb *bolt.Bucket, k string, edit func(v []byte) []byte) error {
	kvs := map[string][]byte{}
	c := mb.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		kvs[string(k)] = bytes.Clone(v)
	}
	kvs[k] = edit(kvs[k])
	delete(kvs, metaMetaChecksum)
	var mcrc uint32
	c = mb.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if v, ok := kvs[string(k)]; ok {
			mcrc = checksumUpdate(checksumUpdate(mcrc, k), v)
		}
	}
	if err := mb.Put([]byte(k), kvs[k]); err != nil {
		return err
	}
	return mb.Put([]byte(metaMetaChecksum), binary.BigEndian.AppendUint32(nil, mcrc))
}

// A meta whose checksum holds but whose counts disagree with the data (the
// issue: "checksum and counts match") is refused by Load and by Verify,
// naming the file, never loaded as a smaller or larger index; a full Scan
// (kvidx inspect summary, entries, diff) refuses it too, except for the
// count of entries, which only Load and Verify count (worker keys: Open
// refuses the file).
func TestMetaCountsMustMatchData(t *testing.T) {
	ix, b, qs := corruptFixture(t)
	for _, tc := range []struct {
		key       string
		scanFails bool
	}{
		{metaEntries, false},
		{metaHolderBlocks, true},
		{metaWorkerKeys, true},
		{metaPlaces, true},
		{metaChunks, true},
	} {
		for _, delta := range []int64{-1, 1} {
			t.Run(fmt.Sprintf("%s%+d", tc.key, delta), func(t *testing.T) {
				bad := editMeta(t, b, func(mb *bolt.Bucket) error {
					return resealMeta(mb, tc.key, func(v []byte) []byte {
						return binary.BigEndian.AppendUint64(nil, uint64(int64(binary.BigEndian.Uint64(v))+delta))
					})
				})
				if tc.scanFails {
					checkBad(t, tc.key, bad, true, ix, qs)
				}
				p := writeTemp(t, bad)
				if _, _, err := Load(context.Background(), p); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
					t.Fatalf("load: %v, want ErrCorrupt naming %s", err, p)
				}
				r, err := Open(p)
				if err != nil {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("open: %v, want ErrCorrupt", err)
					}
					return
				}
				defer r.Close()
				if err := r.Verify(context.Background()); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
					t.Fatalf("verify: %v, want ErrCorrupt naming %s", err, p)
				}
			})
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A file without chunks whose consistent meta counts some is refused by
// Load and by a full Scan alike.
func TestMetaCountsOfEmptyFile(t *testing.T) {
	empty := engine.New()
	b, err := os.ReadFile(writeSnap(t, t.TempDir(), empty, 9))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{metaHolderBlocks, metaPlaces, metaChunks} {
		t.Run(k, func(t *testing.T) {
			bad := editMeta(t, b, func(mb *bolt.Bucket) error {
				return resealMeta(mb, k, func(v []byte) []byte {
					return binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(v)+1)
				})
			})
			checkBad(t, k, bad, true, empty, [][]uint64{{1}})
		})
	}
}
