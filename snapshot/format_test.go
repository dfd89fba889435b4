package snapshot

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/golang/snappy"
)

// A stored (uncompressed) chunk body must be a snappy block that any snappy
// decoder reads back, at every literal-length encoding's edges.
func TestSnappyStored(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 59, 60, 61, 62, 255, 256, 257, 65535, 65536, 65537, 1<<24 - 1, 1 << 24, 1<<24 + 1} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		block := appendSnappyStored([]byte("prefix"), src)
		if !bytes.HasPrefix(block, []byte("prefix")) {
			t.Fatalf("%d bytes: prefix lost", n)
		}
		got, err := snappy.Decode(nil, block[len("prefix"):])
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("%d bytes: decoded body differs", n)
		}
		if over := len(block) - len("prefix") - n; over > 10 {
			t.Fatalf("%d bytes: %d bytes of framing", n, over)
		}
	}
}
