package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvidx/kvidx/engine"
)

// The fixture's two snapshots (kvidx inspect's golden files describe them):
// A at WAL index 30, B at 50, whose two stale parent links are legitimate.
const (
	fixSnapA = "../testdata/datadir-small/snapshots/snapshot-00000000000000000030.bolt"
	fixSnapB = "../testdata/datadir-small/snapshots/snapshot-00000000000000000050.bolt"
)

// damageFixture copies fixture B to a temporary file under B's name, runs
// edit in a write transaction on it, then, if resealData, recomputes the
// data checksum, so that edit's defect is the only one the checksums show.
func damageFixture(t *testing.T, edit func(tx *bolt.Tx) error, resealData bool) string {
	t.Helper()
	b, err := os.ReadFile(fixSnapB)
	if err != nil {
		t.Fatal(err)
	}
	b = editMeta(t, b, func(mb *bolt.Bucket) error {
		tx := mb.Tx()
		if err := edit(tx); err != nil {
			return err
		}
		if !resealData {
			return nil
		}
		crc := checksumUpdate(0, tx.Bucket(bucketWorkers).Get(workersKey))
		c := tx.Bucket(bucketPlaces).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			crc = checksumUpdate(checksumUpdate(crc, k), v)
		}
		return resealMeta(tx.Bucket(bucketMeta), metaChecksum, func([]byte) []byte { return binary.BigEndian.AppendUint32(nil, crc) })
	})
	p := filepath.Join(t.TempDir(), filepath.Base(fixSnapB))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// copyAs copies src to a temporary file named name.
func copyAs(t *testing.T, src, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// staleLinks writes a snapshot whose many parent links do not chain: one
// worker stores 100 two-block chains, removes their first blocks, then
// stores 100 other first blocks, which take the freed places' slots.
func staleLinks(t *testing.T) string {
	t.Helper()
	ix := engine.New()
	w := engine.WorkerKey{WorkerID: 1}
	rm := engine.Event{Worker: w, Kind: engine.KindRemoved}
	for i := range uint64(100) {
		ev := engine.Event{Worker: w, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 1000 + i, TokensHash: 500 + i}, {BlockHash: 2000 + i, TokensHash: 7}}}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
		rm.BlockHashes = append(rm.BlockHashes, 1000+i)
	}
	if err := ix.Apply(&rm); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(100) {
		ev := engine.Event{Worker: w, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 3000 + i, TokensHash: 900 + i}}}
		if err := ix.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	return writeSnap(t, t.TempDir(), ix, 9)
}

// With Strict every stale parent link is a finding, not only the 20 that
// Warnings lists: "inspect verify --strict" said "20 findings" of a file
// with 58 stale links.
func TestCheckStrictCountsEveryStaleLink(t *testing.T) {
	path := staleLinks(t)
	for _, strict := range []bool{false, true} {
		rep, err := Check(context.Background(), path, CheckOptions{Strict: strict})
		if err != nil {
			t.Fatal(err)
		}
		if rep.StaleParentLinks <= maxWarnings || len(rep.Warnings) != maxWarnings {
			t.Fatalf("strict %v: %d stale links, %d warnings; the fixture wants more than %d stale links, %[4]d listed", strict, rep.StaleParentLinks, len(rep.Warnings), maxWarnings)
		}
		want := 0
		if strict {
			want = rep.StaleParentLinks
		}
		if len(rep.Findings) != want {
			t.Fatalf("strict %v: %d findings of %d stale links, want %d", strict, len(rep.Findings), rep.StaleParentLinks, want)
		}
		for i, w := range rep.Warnings {
			if strict && rep.Findings[i] != "parent link: "+w {
				t.Fatalf("finding %d %q, want %q", i, rep.Findings[i], "parent link: "+w)
			}
		}
	}
}

func TestCheck(t *testing.T) {
	staleB := []string{
		"place 22 (position 3): parent 5 is not at position 2",
		"place 32 (position 5): parent 11 is not at position 4",
	}
	tests := []struct {
		name string
		path func(t *testing.T) string
		opts CheckOptions
		// want, when set, is the whole report; else the findings must
		// mention every string of wantFinding.
		want        *CheckReport
		wantFinding []string
	}{
		{"clean A", func(*testing.T) string { return fixSnapA }, CheckOptions{},
			&CheckReport{Findings: []string{}, Warnings: []string{}, Places: 67, ParentLinks: 44}, nil},
		{"clean B with stale links", func(*testing.T) string { return fixSnapB }, CheckOptions{},
			&CheckReport{Findings: []string{}, Warnings: staleB, Places: 78, ParentLinks: 55, StaleParentLinks: 2}, nil},
		{"strict B", func(*testing.T) string { return fixSnapB }, CheckOptions{Strict: true},
			&CheckReport{Findings: []string{"parent link: " + staleB[0], "parent link: " + staleB[1]}, Warnings: staleB, Places: 78, ParentLinks: 55, StaleParentLinks: 2}, nil},
		{"copy under another name", func(t *testing.T) string { return copyAs(t, fixSnapA, "copy.bolt") }, CheckOptions{},
			&CheckReport{Findings: []string{}, Warnings: []string{}, Places: 67, ParentLinks: 44}, nil},
		{"name and meta disagree", func(t *testing.T) string { return copyAs(t, fixSnapA, FileName(31)) }, CheckOptions{},
			&CheckReport{Findings: []string{"name: the file's name says WAL index 31, its meta 30 (a restart sets it aside as damaged)"}, Warnings: []string{}, Places: 67, ParentLinks: 44}, nil},
		{"directory", func(t *testing.T) string { return t.TempDir() }, CheckOptions{},
			nil, []string{"open: snapshot ", "is a directory, not a snapshot file"}},
		{"empty entry", func(t *testing.T) string {
			// Every chunk replaced by one holding a single place without holders.
			return damageFixture(t, func(tx *bolt.Tx) error {
				if err := tx.DeleteBucket(bucketPlaces); err != nil {
					return err
				}
				pb, err := tx.CreateBucket(bucketPlaces)
				if err != nil {
					return err
				}
				var e encoder
				e.reset(1)
				if err := e.add(&engine.PlaceRecord{TokensHash: 101, Seq: 101}, 1, 0, nil); err != nil {
					return err
				}
				return pb.Put(chunkKey(0, 0), e.appendValue(nil, false))
			}, true)
		}, CheckOptions{}, nil, []string{"checksums and counts: ", "bad holder count 0 (an empty entry: a place without holders)"}},
		{"count mismatch", func(t *testing.T) string {
			return damageFixture(t, func(tx *bolt.Tx) error {
				return resealMeta(tx.Bucket(bucketMeta), metaEntries, func(v []byte) []byte {
					return binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(v)+1)
				})
			}, false)
		}, CheckOptions{}, nil, []string{"checksums and counts: ", "entries, meta says"}},
		{"bad checksum", func(t *testing.T) string {
			return damageFixture(t, func(tx *bolt.Tx) error {
				pb := tx.Bucket(bucketPlaces)
				k, v := pb.Cursor().First()
				v = bytes.Clone(v)
				v[len(v)-1] ^= 0x40
				return pb.Put(bytes.Clone(k), v)
			}, false)
		}, CheckOptions{}, nil, []string{"data checksum mismatch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path(t)
			got, err := Check(context.Background(), path, tt.opts)
			if err != nil {
				t.Fatalf("Check(%s): %v", path, err)
			}
			if tt.want != nil {
				if !slices.Equal(got.Findings, tt.want.Findings) || !slices.Equal(got.Warnings, tt.want.Warnings) ||
					got.Places != tt.want.Places || got.ParentLinks != tt.want.ParentLinks || got.StaleParentLinks != tt.want.StaleParentLinks {
					t.Fatalf("Check(%s) = %+v, want %+v", path, got, tt.want)
				}
				return
			}
			all := strings.Join(got.Findings, "\n")
			for _, w := range tt.wantFinding {
				if !strings.Contains(all, w) {
					t.Fatalf("Check(%s): findings do not mention %q:\n%s", path, w, all)
				}
			}
		})
	}
}

// A check that ctx cuts short is an error, not a report whose findings
// are the context's end.
func TestCheckCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Check(ctx, fixSnapB, CheckOptions{})
	if !errors.Is(err, context.Canceled) || rep != nil {
		t.Fatalf("Check with a canceled context: %+v, %v; want context.Canceled", rep, err)
	}
}

// Check reports its progress through the pass over places, every 1024
// places, with the meta's count of places as the total.
func TestCheckProgress(t *testing.T) {
	path := writeSnap(t, t.TempDir(), bigIndex(rand.New(rand.NewPCG(3, 3)), 80, 40), 9, WithChunkBytes(2000))
	var calls [][2]int
	rep, err := Check(context.Background(), path, CheckOptions{Progress: func(done, total int) {
		calls = append(calls, [2]int{done, total})
	}})
	if err != nil || len(rep.Findings) > 0 {
		t.Fatalf("Check: %+v, %v", rep, err)
	}
	if rep.Places < 2048 {
		t.Fatalf("fixture of %d places: too small to report progress twice", rep.Places)
	}
	// Three passes (checksums and counts, each place, the load), each
	// counting the places once: progress rises to the end, never past it.
	total := 3 * rep.Places
	prev := 0
	for i, c := range calls {
		if c[1] != total || c[0] < prev || c[0] > total {
			t.Fatalf("progress call %d: (%d, %d) after %d, want a count rising to %d", i, c[0], c[1], prev, total)
		}
		prev = c[0]
	}
	if prev != total {
		t.Fatalf("progress ended at %d of %d: the bar stops short of the end", prev, total)
	}
	if len(calls) < 3 || calls[0][0] > rep.Places {
		t.Fatalf("progress calls %v: want calls in each pass", calls)
	}
}

func TestDiff(t *testing.T) {
	golden, err := os.ReadFile("../testdata/inspect/diff-list.txt")
	if err != nil {
		t.Fatal(err)
	}
	// The golden file is the counts' table (4 lines), then the changes.
	changes := strings.Split(strings.TrimSuffix(string(golden), "\n"), "\n")[4:]
	tests := []struct {
		name string
		a, b string
		opts DiffOptions
		want DiffReport
	}{
		{"equal", fixSnapA, fixSnapA, DiffOptions{List: true}, DiffReport{}},
		{"A to B", fixSnapA, fixSnapB, DiffOptions{}, DiffReport{
			EntriesAdded: 16, EntriesRemoved: 6, PlacesAdded: 24, PlacesRemoved: 13, HolderBlocksAdded: 27, HolderBlocksRemoved: 14}},
		{"B to A", fixSnapB, fixSnapA, DiffOptions{}, DiffReport{
			EntriesAdded: 6, EntriesRemoved: 16, PlacesAdded: 13, PlacesRemoved: 24, HolderBlocksAdded: 14, HolderBlocksRemoved: 27}},
		{"A to B listed", fixSnapA, fixSnapB, DiffOptions{List: true}, DiffReport{
			EntriesAdded: 16, EntriesRemoved: 6, PlacesAdded: 24, PlacesRemoved: 13, HolderBlocksAdded: 27, HolderBlocksRemoved: 14,
			Changes: changes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Diff(context.Background(), tt.a, tt.b, tt.opts)
			if err != nil {
				t.Fatalf("Diff: %v", err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("Diff = %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

// A file Diff cannot open or read is an error naming it.
func TestDiffBadFile(t *testing.T) {
	damaged := damageFixture(t, func(tx *bolt.Tx) error {
		pb := tx.Bucket(bucketPlaces)
		k, v := pb.Cursor().First()
		v = bytes.Clone(v)
		v[len(v)-1] ^= 0x40
		return pb.Put(bytes.Clone(k), v)
	}, false)
	dir := t.TempDir()
	tests := []struct {
		name, a, b, want string
		corrupt          bool
	}{
		{"directory", dir, fixSnapA, dir + ": is a directory", false},
		{"damaged B", fixSnapA, damaged, damaged + ": data checksum mismatch", true},
		{"damaged A", damaged, fixSnapA, damaged + ": data checksum mismatch", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Diff(context.Background(), tt.a, tt.b, DiffOptions{})
			if err == nil || rep != nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrCorrupt) != tt.corrupt {
				t.Fatalf("Diff: %+v, %v; want an error mentioning %q (ErrCorrupt: %v)", rep, err, tt.want, tt.corrupt)
			}
		})
	}
}

// A stream whose sender ctx's end stopped ends with ctx's error: it ended
// with none, and Diff returned a partial comparison as the whole one.
func TestStreamPositionsCanceled(t *testing.T) {
	// One chunk of many positions: once the channel's buffer is full, the
	// sender is in the scan's yield, where no chunk boundary checks ctx.
	ix := engine.New()
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored}
	for i := range 64 {
		ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: uint64(1000 + i), TokensHash: uint64(1 + i%3)})
	}
	if err := ix.Apply(&ev); err != nil {
		t.Fatal(err)
	}
	path := writeSnap(t, t.TempDir(), ix, 9)
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Meta().Chunks != 1 {
		t.Fatalf("fixture of %d chunks, want 1", r.Meta().Chunks)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, errc := streamPositions(ctx, r)
	for len(ch) < cap(ch) {
		runtime.Gosched()
	}
	cancel()
	n := 0
	for range ch {
		n++
	}
	if err := <-errc; n < 64 && !errors.Is(err, context.Canceled) {
		t.Fatalf("stream stopped after %d of 64 positions with error %v, want context.Canceled", n, err)
	}
}
