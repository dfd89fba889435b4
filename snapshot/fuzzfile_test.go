package snapshot

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// FuzzFile: a small real snapshot damaged by the fuzz input (each 4 bytes:
// a 3-byte big-endian offset into the file, then a byte XORed there) is
// refused by Load, Open, Verify and a Scan with an error matching
// ErrCorrupt, or read as a sound file; never a panic, a hang or gigabytes
// allocated because a damaged length was trusted.
func FuzzFile(f *testing.F) {
	ix := bigIndex(rand.New(rand.NewPCG(3, 4)), 6, 8)
	base, err := os.ReadFile(writeSnap(f, f.TempDir(), ix, 1, WithChunkBytes(256)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{})
	for _, off := range []int{0, 16, 4096 + 16, 2*4096 + 16, 3*4096 + 16, 3*4096 + 40, len(base) - 100} {
		f.Add([]byte{byte(off >> 16), byte(off >> 8), byte(off), 0xff})
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, edits []byte) {
		b := append([]byte(nil), base...)
		for e := edits; len(e) >= 4; e = e[4:] {
			off := (int(e[0])<<16 | int(e[1])<<8 | int(e[2])) % len(b)
			b[off] ^= e[3]
		}
		p := filepath.Join(dir, FileName(1))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		hang := time.AfterFunc(20*time.Second, func() { panic("snapshot reading hangs on fuzz input") })
		defer hang.Stop()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		check := func(what string, err error) {
			t.Helper()
			if err != nil && (!errors.Is(err, ErrCorrupt) || !strings.HasPrefix(err.Error(), "snapshot "+p+": ")) {
				t.Fatalf("%s: %v, want an ErrCorrupt naming the file", what, err)
			}
		}
		_, _, err := Load(context.Background(), p)
		check("Load", err)
		r, err := Open(p)
		check("Open", err)
		if err == nil {
			check("Verify", r.Verify(context.Background()))
			all := func(*engine.PlaceRecord) bool { return true }
			check("full Scan", r.Scan(context.Background(), 0, math.MaxUint32, nil, all))
			if ws := r.Workers(); len(ws) > 0 {
				check("Scan of a worker", r.Scan(context.Background(), 2, 5, ws[:1], all))
			}
			r.Close()
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 100<<20 {
			t.Fatalf("%d bytes allocated reading a %d-byte file", grew, len(b))
		}
	})
}
