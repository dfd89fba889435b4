package snapshot

import (
	"encoding/binary"
	"fmt"
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
