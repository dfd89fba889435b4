package snapshot

import (
	"math/rand/v2"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestDefaultChunksShareLeafPages: with the default chunk size, two chunk
// values fit one bbolt page, so the places bucket's leaves are one page
// each. bbolt puts at least two values on a leaf and writes a leaf that
// spans pages from a buffer it allocates for that commit alone (a one-page
// leaf comes from a pool it reuses); with chunks near a whole page, every
// write allocated and faulted in as much memory as the file (see pageSize).
func TestDefaultChunksShareLeafPages(t *testing.T) {
	ix := bigIndex(rand.New(rand.NewPCG(5, 6)), 400, 80)
	path := writeSnap(t, t.TempDir(), ix, 1)
	db, err := bolt.Open(path, 0o444, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketPlaces).Stats()
		if st.KeyN < 8 {
			t.Fatalf("places bucket has %d chunks; the test needs several leaves", st.KeyN)
		}
		if st.LeafPageN < 2 || st.LeafOverflowN != 0 {
			t.Errorf("places bucket: %d chunks on %d leaves with %d overflow pages, want one page a leaf", st.KeyN, st.LeafPageN, st.LeafOverflowN)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
