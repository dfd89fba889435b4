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

// The entry counter counts distinct tokens hashes a position, for small and
// large positions, spread hashes and small sequential ones alike.
func TestEntryCounter(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	var c entryCounter
	want := 0
	for pos, size := range []int{1, 3, 4095, 4096, 5000, 200000, 7} {
		seen := map[uint64]bool{}
		for i := range size {
			th := rng.Uint64()
			switch {
			case pos%2 == 1:
				th = uint64(rng.IntN(size/2 + 1)) // small values, many repeated
			case i%5 == 0 && i > 0:
				th = uint64(i) // a few small values among spread ones
			}
			seen[th] = true
			c.add(uint32(pos), th)
		}
		want += len(seen)
	}
	if got := c.total(); got != want {
		t.Fatalf("counted %d entries, want %d", got, want)
	}
}

// TestCheckDecodedLen: a chunk may decode to more than any fixed size (one
// place held under millions of block hashes), but to no more than snappy
// can produce from its bytes.
func TestCheckDecodedLen(t *testing.T) {
	zeros := snappy.Encode(nil, make([]byte, 64<<20))
	for _, tc := range []struct {
		n, compressed int
		ok            bool
	}{
		{64 << 20, len(zeros), true},          // the most snappy expands
		{67_200_024, 3_200_000, true},         // a 67 MB chunk Write produced
		{67_200_024, 62 << 10, false},         // a damaged length on a small chunk
		{1 << 40, 62 << 10, false},            // far beyond
		{-1, 10, false},                       // an overflowed length
		{0, 0, true},                          // empty
		{maxSnappyExpansion * 100, 100, true}, // the bound itself
	} {
		if err := checkDecodedLen(tc.n, tc.compressed); (err == nil) != tc.ok {
			t.Errorf("checkDecodedLen(%d, %d) = %v, want ok %v", tc.n, tc.compressed, err, tc.ok)
		}
	}
}
