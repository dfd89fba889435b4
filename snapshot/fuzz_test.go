package snapshot

import (
	"math"
	"math/rand/v2"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvidx/kvidx/engine"
)

// FuzzChunk: no chunk (key and value, as bbolt stores them) panics the
// decoder, or the engine's loader fed what the decoder accepts; a file's
// checksum catches damage only after its chunks were decoded. Seeds: the
// chunks of a small snapshot, whose worker table the decoder uses.
func FuzzChunk(f *testing.F) {
	ix := bigIndex(rand.New(rand.NewPCG(3, 4)), 6, 8)
	path := writeSnap(f, f.TempDir(), ix, 1, WithChunkBytes(256))
	r, err := Open(path)
	if err != nil {
		f.Fatal(err)
	}
	workers := r.Workers()
	err = r.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPlaces).ForEach(func(k, v []byte) error {
			f.Add(append([]byte(nil), k...), append([]byte(nil), v...))
			return nil
		})
	})
	r.Close()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, k, v []byte) {
		d := &decoder{version: FormatVersion, workers: workers}
		var out engine.PlaceBatch
		if err := d.chunk(k, v, 0, math.MaxUint32, &out); err != nil {
			return
		}
		l := engine.NewLoader()
		defer l.Close()
		if err := l.AddPlaces(&out); err != nil {
			return
		}
		if _, err := l.Finish(engine.Counters{}); err != nil {
			return
		}
	})
}
