package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestCheckPagesGoodLayouts: checkPages accepts every layout bbolt writes
// that a snapshot can take, whatever the page size in the meta: trees of
// branch pages three deep and more (a small fill makes them with few keys),
// overflow pages, inline buckets, an empty bucket, nested buckets (not
// walked), and the pages a second transaction freed and reused.
func TestCheckPagesGoodLayouts(t *testing.T) {
	tests := []struct {
		name      string
		pageSize  int
		keys      int
		valueSize int
		fill      float64
		nested    bool
		minDepth  int // of the places bucket
	}{
		{"4 KiB pages, deep", 4096, 60000, 8, 0.1, false, 4},
		{"4 KiB pages, overflow", 4096, 100, 20000, 1, false, 2},
		{"8 KiB pages, nested buckets", 8192, 5000, 30, 0.1, true, 3},
		{"16 KiB pages, deep", 16384, 80000, 8, 0.1, false, 3},
		{"64 KiB pages", 65536, 3000, 100, 1, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), FileName(1))
			db, err := bolt.Open(p, 0o644, &bolt.Options{PageSize: tt.pageSize})
			if err != nil {
				t.Fatal(err)
			}
			put := func(from, to int) error {
				return db.Update(func(tx *bolt.Tx) error {
					m, err := tx.CreateBucketIfNotExists(bucketMeta)
					if err != nil {
						return fmt.Errorf("meta bucket: %w", err)
					}
					if err := m.Put([]byte("k"), []byte{byte(from)}); err != nil {
						return fmt.Errorf("meta key: %w", err)
					}
					if _, err := tx.CreateBucketIfNotExists(bucketWorkers); err != nil {
						return fmt.Errorf("workers bucket: %w", err)
					}
					b, err := tx.CreateBucketIfNotExists(bucketPlaces)
					if err != nil {
						return fmt.Errorf("places bucket: %w", err)
					}
					b.FillPercent = tt.fill
					for i := from; i < to; i++ {
						k := binary.BigEndian.AppendUint64(nil, uint64(i))
						if tt.nested && i%50 == 0 {
							nb, err := b.CreateBucket(k)
							if err != nil {
								return fmt.Errorf("nested bucket %d: %w", i, err)
							}
							if err := nb.Put([]byte("x"), []byte("y")); err != nil {
								return fmt.Errorf("nested bucket %d: %w", i, err)
							}
							continue
						}
						if err := b.Put(k, make([]byte, tt.valueSize)); err != nil {
							return fmt.Errorf("key %d: %w", i, err)
						}
					}
					return nil
				})
			}
			// Two transactions: the second frees pages and reuses some.
			if err := put(0, tt.keys); err != nil {
				t.Fatal(err)
			}
			if err := put(tt.keys, tt.keys+tt.keys/10); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = bolt.Open(p, 0, &bolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.View(func(tx *bolt.Tx) error {
				if d := tx.Bucket(bucketPlaces).Stats().Depth; d < tt.minDepth {
					return fmt.Errorf("places bucket %d pages deep, want at least %d", d, tt.minDepth)
				}
				return (&Reader{path: p}).checkPages(tx)
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCheckPagesOverflowRuns: a page's overflow pages are its own. Open
// refuses a file whose branch element names a page within another page's
// overflow pages (there, a page header forged in a chunk's data), whose
// page's run covers a page walked after it or before it, whose run reaches
// past the file's pages, or that reaches a page twice, naming the file and
// the page. The fixture is a snapshot whose places bucket is a branch page
// over leaves of two 100 KiB chunks, runs of three pages.
func TestCheckPagesOverflowRuns(t *testing.T) {
	ix := bigIndex(rand.New(rand.NewPCG(3, 4)), 200, 40)
	base, err := os.ReadFile(writeSnap(t, t.TempDir(), ix, 1, WithChunkBytes(100<<10)))
	if err != nil {
		t.Fatal(err)
	}
	root, kids := placesBranch(t, base)
	ps := int64(pageSize)
	overflow := func(id int64) int64 { return int64(binary.LittleEndian.Uint32(base[id*ps+12:])) }
	// Two leaves named by elements i and i+1, the first a run of three
	// pages or more that the second follows.
	i := 0
	for i < len(kids)-1 && (overflow(kids[i]) < 2 || kids[i+1] != kids[i]+overflow(kids[i])+1) {
		i++
	}
	if i == len(kids)-1 {
		t.Fatalf("places leaves %v: no run of three pages or more followed by the next leaf", kids)
	}
	c0, c1 := kids[i], kids[i+1]
	// setKid makes branch element e name page id.
	setKid := func(b []byte, e int, id int64) {
		binary.LittleEndian.PutUint64(b[root*ps+pageHeader+elementSize*int64(e)+8:], uint64(id))
	}
	setOverflow := func(b []byte, id int64, n uint32) { binary.LittleEndian.PutUint32(b[id*ps+12:], n) }
	for _, tc := range []struct {
		name string
		edit func(b []byte)
		want string
	}{
		{"element into the middle of a run", func(b []byte) {
			// A leaf page of no elements carrying its own id, forged in
			// the first leaf's chunk data.
			clear(b[(c0+1)*ps : (c0+1)*ps+pageHeader])
			binary.LittleEndian.PutUint64(b[(c0+1)*ps:], uint64(c0+1))
			binary.LittleEndian.PutUint16(b[(c0+1)*ps+8:], leafPage)
			setKid(b, i+1, c0+1)
		}, fmt.Sprintf("page %d lies within another page's overflow pages", c0+1)},
		{"run over a page walked after it", func(b []byte) {
			setOverflow(b, c0, uint32(c1-c0))
		}, fmt.Sprintf("page %d lies within another page's overflow pages", c1)},
		{"run over a page walked before it", func(b []byte) {
			setKid(b, i, c1)
			setKid(b, i+1, c0)
			setOverflow(b, c0, uint32(c1-c0))
		}, fmt.Sprintf("page %d of %d bytes overlaps page %d", c0, (c1-c0+1)*ps, c1)},
		{"run past the file's pages", func(b []byte) {
			setOverflow(b, c1, uint32(int64(len(b))/ps-c1))
		}, fmt.Sprintf("page %d of %d bytes reaches past the file's pages", c1, int64(len(base))-c1*ps+ps)},
		{"page reached twice", func(b []byte) {
			setKid(b, i+1, c0)
		}, fmt.Sprintf("page %d reached twice", c0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(base)
			tc.edit(b)
			p := writeTemp(t, b)
			r, err := Open(p)
			if err == nil {
				r.Close()
			}
			if want := "snapshot " + p + ": " + tc.want; !errors.Is(err, ErrCorrupt) || err.Error() != want {
				t.Fatalf("Open: %v, want %s", err, want)
			}
		})
	}
}

// placesBranch returns the page of a snapshot file's places bucket, which
// must be a branch page of two elements or more, and the pages it names.
func placesBranch(t *testing.T, b []byte) (root int64, kids []int64) {
	t.Helper()
	db, err := bolt.Open(writeTemp(t, b), 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		root = int64(tx.Bucket(bucketPlaces).Root())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	page := b[root*pageSize:]
	if flags, n := binary.LittleEndian.Uint16(page[8:]), int(binary.LittleEndian.Uint16(page[10:])); flags != branchPage || n < 2 {
		t.Fatalf("places bucket page %d: flags %#x, %d elements; want a branch page of 2 or more", root, flags, n)
	}
	for i := range int(binary.LittleEndian.Uint16(page[10:])) {
		kids = append(kids, int64(binary.LittleEndian.Uint64(page[pageHeader+elementSize*i+8:])))
	}
	return root, kids
}
