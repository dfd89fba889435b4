package snapshot

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvidx/kvidx/engine"
)

func TestRoundtripSmall(t *testing.T) {
	ix := engine.New()
	w0, w1, w2 := engine.WorkerKey{WorkerID: 1}, engine.WorkerKey{WorkerID: 2, DPRank: 3}, engine.WorkerKey{WorkerID: 9}
	evs := []engine.Event{
		{Worker: w0, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 100, TokensHash: 1}, {BlockHash: 101, TokensHash: 2}, {BlockHash: 102, TokensHash: 3}}},
		{Worker: w1, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 200, TokensHash: 1}, {BlockHash: 201, TokensHash: 2}}},
		// Same content under a second block hash.
		{Worker: w1, Kind: engine.KindStored, HasParent: true, ParentHash: 200, Blocks: []engine.Block{{BlockHash: 202, TokensHash: 2}, {BlockHash: 203, TokensHash: 4}}},
		// A chain starting mid-sequence.
		{Worker: w2, Kind: engine.KindStored, HasStartPosition: true, StartPosition: 5, Blocks: []engine.Block{{BlockHash: 300, TokensHash: 7}, {BlockHash: 301, TokensHash: 8}}},
		{Worker: w0, Kind: engine.KindRemoved, BlockHashes: []uint64{101}},                                                             // a hole
		{Worker: w2, Kind: engine.KindStored, HasParent: true, ParentHash: 999, Blocks: []engine.Block{{BlockHash: 1, TokensHash: 1}}}, // rejected
	}
	apply(ix, evs)
	if ix.Stats().HolderBlocks != 8 {
		t.Fatalf("hand-made index: %+v", ix.Stats())
	}
	dir := t.TempDir()
	created := time.Unix(1700000000, 123)
	sources := []Source{{"tcp://a", 7}, {"tcp://b", 0}}
	p, err := Write(context.Background(), dir, ix.Freeze(), Meta{Index: 42, Sources: sources, Created: created})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != "snapshot-00000000000000000042.bolt" {
		t.Fatalf("path %s", p)
	}
	got, m := loadSnap(t, p)
	sameIndex(t, got, ix, [][]uint64{{}, {1}, {1, 2}, {1, 2, 3}, {1, 2, 4}, {1, 2, 3, 9}, {7}, {2}, {1, 1}, {1, 2, 4, 5, 6, 7, 8}})
	if m.Index != 42 || !m.Created.Equal(created) || !slices.Equal(m.Sources, sources) || m.Version != FormatVersion || m.Stats != ix.Stats() || m.Chunks != 1 || m.Places == 0 {
		t.Fatalf("meta %+v", m)
	}

	// The loaded index applies further events like the original.
	more := []engine.Event{
		{Worker: w0, Kind: engine.KindStored, HasParent: true, ParentHash: 100, Blocks: []engine.Block{{BlockHash: 110, TokensHash: 2}}},
		{Worker: w1, Kind: engine.KindCleared},
	}
	apply(ix, more)
	apply(got, more)
	sameIndex(t, got, ix, [][]uint64{{1, 2, 3}, {1, 2, 4}})
}

func TestRoundtripEmpty(t *testing.T) {
	ix := engine.New()
	apply(ix, []engine.Event{{Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 1, TokensHash: 1}}}, {Kind: engine.KindCleared}})
	p := writeSnap(t, t.TempDir(), ix, 0)
	got, m := loadSnap(t, p)
	sameIndex(t, got, ix, [][]uint64{{1}})
	if m.Chunks != 0 || m.Places != 0 || m.Stats.Counters.EventsCleared != 1 {
		t.Fatalf("meta %+v", m)
	}
}

// scanAll reads back every place of a file.
func scanAll(t testing.TB, path string, from, to uint32, workers []engine.WorkerKey) []engine.PlaceRecord {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []engine.PlaceRecord
	err = r.Scan(context.Background(), from, to, workers, func(rec *engine.PlaceRecord) bool {
		c := *rec
		c.Holders = nil
		for _, h := range rec.Holders {
			c.Holders = append(c.Holders, engine.HolderRecord{Worker: h.Worker, BlockHashes: slices.Clone(h.BlockHashes)})
		}
		out = append(out, c)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundtripRandom(t *testing.T) {
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 1))
		qs := queries(rng)
		ix := engine.New()
		evs := randEvents(rng, 200+rng.IntN(4000))
		apply(ix, evs)
		var opts []Option
		if seed%2 == 0 {
			opts = append(opts, WithChunkBytes(1+rng.IntN(600))) // many chunks
		}
		dir := t.TempDir()
		p := writeSnap(t, dir, ix, seed, opts...)
		got, m := loadSnap(t, p)
		sameIndex(t, got, ix, qs)

		// No empty entry: every place has a holder with a block hash, and
		// the distinct (position, tokens hash) pairs are the engine's entries.
		recs := scanAll(t, p, 0, math.MaxUint32, nil)
		type entry struct {
			pos uint32
			th  uint64
		}
		entries := map[entry]bool{}
		hbs := 0
		for _, r := range recs {
			if len(r.Holders) == 0 {
				t.Fatalf("seed %d: place %d has no holder", seed, r.ID)
			}
			for _, h := range r.Holders {
				if len(h.BlockHashes) == 0 {
					t.Fatalf("seed %d: place %d: holder %v without block hash", seed, r.ID, h.Worker)
				}
				hbs += len(h.BlockHashes)
			}
			entries[entry{r.Position, r.TokensHash}] = true
		}
		if len(entries) != ix.Len() || m.Stats.Entries != ix.Len() || hbs != ix.Stats().HolderBlocks || len(recs) != m.Places {
			t.Fatalf("seed %d: file has %d entries (meta %d), %d holder-blocks; engine %+v", seed, len(entries), m.Stats.Entries, hbs, ix.Stats())
		}

		// Both keep applying events alike.
		more := randEvents(rng, 300)
		for i := range more {
			if a, b := engine.RejectReason(got.Apply(&more[i])), engine.RejectReason(ix.Apply(&more[i])); a != b {
				t.Fatalf("seed %d: event %+v: loaded %q, original %q", seed, more[i], a, b)
			}
		}
		sameIndex(t, got, ix, qs)
	}
}

func TestRoundtripRapid(t *testing.T) {
	qs := queries(rand.New(rand.NewPCG(1, 2)))
	dir := t.TempDir()
	rapid.Check(t, func(rt *rapid.T) {
		seed := rapid.Uint64().Draw(rt, "seed")
		n := rapid.IntRange(0, 400).Draw(rt, "events")
		chunk := rapid.IntRange(1, 2000).Draw(rt, "chunk_bytes")
		tx := rapid.IntRange(1, 20000).Draw(rt, "tx_bytes")
		ix := engine.New()
		apply(ix, randEvents(rand.New(rand.NewPCG(seed, 0)), n))
		p, err := Write(context.Background(), dir, ix.Freeze(), Meta{Index: 1}, WithChunkBytes(chunk), withTxBytes(tx))
		if err != nil {
			rt.Fatal(err)
		}
		got, _, err := Load(context.Background(), p)
		if err != nil {
			rt.Fatal(err)
		}
		sameIndex(rt, got, ix, qs)
	})
}

func TestScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	ix := engine.New()
	apply(ix, randEvents(rng, 5000))
	p := writeSnap(t, t.TempDir(), ix, 1, WithChunkBytes(300))
	all := scanAll(t, p, 0, math.MaxUint32, nil)
	maxPos := all[len(all)-1].Position
	for range 60 {
		from, to := uint32(rng.IntN(int(maxPos)+3)), uint32(rng.IntN(int(maxPos)+3))
		var ws []engine.WorkerKey
		for range rng.IntN(3) {
			ws = append(ws, randWorker(rng))
		}
		var want []engine.PlaceRecord
		for _, r := range all {
			if r.Position < from || r.Position > to {
				continue
			}
			if len(ws) > 0 {
				hs := slices.DeleteFunc(slices.Clone(r.Holders), func(h engine.HolderRecord) bool { return !slices.Contains(ws, h.Worker) })
				if len(hs) == 0 {
					continue
				}
				r.Holders = hs
			}
			want = append(want, r)
		}
		got := scanAll(t, p, from, to, ws)
		if !slices.EqualFunc(got, want, func(a, b engine.PlaceRecord) bool {
			return a.ID == b.ID && a.Parent == b.Parent && a.Position == b.Position && a.TokensHash == b.TokensHash && a.Seq == b.Seq &&
				slices.EqualFunc(a.Holders, b.Holders, func(x, y engine.HolderRecord) bool {
					return x.Worker == y.Worker && slices.Equal(x.BlockHashes, y.BlockHashes)
				})
		}) {
			t.Fatalf("scan [%d, %d] workers %v: %d places, want %d", from, to, ws, len(got), len(want))
		}
	}
	// Early stop.
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	if err := r.Scan(context.Background(), 0, math.MaxUint32, nil, func(*engine.PlaceRecord) bool { n++; return n < 3 }); err != nil || n != 3 {
		t.Fatalf("early stop: %d places, %v", n, err)
	}
	if err := r.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A snapshot of a Frozen taken while events keep coming equals a fresh
// engine fed exactly the events applied before Freeze returned.
func TestConsistentCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	evs := randEvents(rng, 30000)
	qs := queries(rng)
	ix := engine.New()
	var mu sync.Mutex
	applied := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range evs {
			mu.Lock()
			_ = ix.Apply(&evs[i])
			applied++
			mu.Unlock()
		}
	}()
	dir := t.TempDir()
	for round := 0; round < 6; round++ {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		mu.Lock()
		f := ix.Freeze()
		n := applied
		mu.Unlock()
		// Written while the applier goes on.
		p, err := Write(context.Background(), dir, f, Meta{Index: uint64(n)}, WithChunkBytes(512))
		if err != nil {
			t.Fatal(err)
		}
		got, m := loadSnap(t, p)
		want := engine.New()
		apply(want, evs[:n])
		if m.Index != uint64(n) {
			t.Fatalf("meta index %d, want %d", m.Index, n)
		}
		sameIndex(t, got, want, qs)
	}
	<-done
}

func TestCancel(t *testing.T) {
	ix := engine.New()
	apply(ix, randEvents(rand.New(rand.NewPCG(1, 1)), 3000))
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, dir, ix.Freeze(), Meta{Index: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("write with canceled context: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("canceled write left %v", ents)
	}
	p := writeSnap(t, dir, ix, 1)
	if _, _, err := Load(ctx, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("load with canceled context: %v", err)
	}
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	ix := engine.New()
	apply(ix, randEvents(rand.New(rand.NewPCG(1, 1)), 100))
	for _, n := range []uint64{5, 100, 7, 20} {
		writeSnap(t, dir, ix, n)
	}
	// Foreign files and temp files.
	for _, name := range []string{"notes.txt", "snapshot-12.bolt", ".snapshot-00000000000000000200.tmp-123", ".snapshot-00000000000000000201.tmp-x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var idx []uint64
	for _, f := range files {
		idx = append(idx, f.Index)
		if f.Path != filepath.Join(dir, FileName(f.Index)) || f.Size == 0 {
			t.Fatalf("file %+v", f)
		}
	}
	if !slices.Equal(idx, []uint64{100, 20, 7, 5}) {
		t.Fatalf("list %v", idx)
	}
	temps, err := TempFiles(dir)
	wantTemps := []string{filepath.Join(dir, ".snapshot-00000000000000000200.tmp-123"), filepath.Join(dir, ".snapshot-00000000000000000201.tmp-x")}
	if err != nil || !slices.Equal(temps, wantTemps) {
		t.Fatalf("temp files: %v %v, want %v", temps, err, wantTemps)
	}
	removed, err := CleanTemp(dir)
	if err != nil || !slices.Equal(removed, wantTemps) {
		t.Fatalf("clean temp: %v %v, want %v", removed, err, wantTemps)
	}
	if temps, err := TempFiles(dir); err != nil || temps != nil {
		t.Fatalf("temp files after clean: %v %v", temps, err)
	}
	// 20 unusable: it neither counts nor goes, being newer than the
	// oldest kept (7); nothing older than 7 remains to delete but 5.
	removed, err = Prune(dir, 2, func(f File) bool { return f.Index != 20 })
	if err != nil || len(removed) != 1 || filepath.Base(removed[0]) != FileName(5) {
		t.Fatalf("prune 2, 20 unusable: %v %v", removed, err)
	}
	removed, err = Prune(dir, 3, nil)
	if err != nil || len(removed) != 0 {
		t.Fatalf("prune 3: %v %v", removed, err)
	}
	if _, err := Prune(dir, 0, nil); err != nil { // default: keep 2
		t.Fatal(err)
	}
	files, _ = List(dir)
	if len(files) != 2 || files[0].Index != 100 || files[1].Index != 20 {
		t.Fatalf("after prune: %+v", files)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"notes.txt", "snapshot-00000000000000000020.bolt", "snapshot-00000000000000000100.bolt", "snapshot-12.bolt"}) {
		t.Fatalf("dir holds %v", names)
	}
	if files, err := List(filepath.Join(dir, "missing")); err != nil || files != nil {
		t.Fatalf("missing dir: %v %v", files, err)
	}
}

func TestParseFileName(t *testing.T) {
	for _, n := range []uint64{0, 1, 42, math.MaxUint64} {
		if got, ok := ParseFileName(FileName(n)); !ok || got != n {
			t.Fatalf("%d: %d %v", n, got, ok)
		}
	}
	for _, s := range []string{"snapshot-1.bolt", "snapshot-0000000000000000000a.bolt", "snapshot-99999999999999999999.bolt", "xsnapshot-00000000000000000001.bolt", "snapshot-00000000000000000001.bolt.tmp"} {
		if _, ok := ParseFileName(s); ok {
			t.Fatalf("%s parsed", s)
		}
	}
}

func TestErrorsNameFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), FileName(1))
	_, _, err := Load(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), p) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(p, []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = Load(context.Background(), p)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Fatalf("garbage: %v", err)
	}
}

// A snapshot linked in from elsewhere is listed with its target's size (it
// was passed over, and recovery said "no snapshot" though the file verified:
// found by review); a dangling link and a directory under a snapshot's name
// are passed over.
func TestListFollowsLinks(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	ix := engine.New()
	apply(ix, randEvents(rand.New(rand.NewPCG(1, 1)), 100))
	target := writeSnap(t, elsewhere, ix, 50)
	if err := os.Symlink(target, filepath.Join(dir, FileName(50))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "gone"), filepath.Join(dir, FileName(60))); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, FileName(70)), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(target)
	if len(files) != 1 || files[0].Index != 50 || files[0].Size != fi.Size() {
		t.Fatalf("list %+v, want the linked snapshot 50 of %d bytes", files, fi.Size())
	}
	if _, _, err := Load(context.Background(), files[0].Path); err != nil {
		t.Fatalf("load through the link: %v", err)
	}
}

// Write over whatever has the snapshot's name: a directory is refused
// before anything is written, naming it and what to do (the rename failed
// only after the whole file was written, with "file exists" and no more:
// `kvidx recover` and every snapshot of `kvidx serve` at that index failed
// so); a dangling link is replaced, as a file is.
func TestWriteOverNonFile(t *testing.T) {
	ix := engine.New()
	apply(ix, randEvents(rand.New(rand.NewPCG(1, 1)), 100))
	for _, tc := range []struct {
		name    string
		make    func(path string) error
		refused bool
	}{
		{"empty directory", func(p string) error { return os.Mkdir(p, 0o755) }, true},
		{"directory with a file", func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "x"), []byte("x"), 0o644)
		}, true},
		{"dangling link", func(p string) error { return os.Symlink(filepath.Join(filepath.Dir(p), "gone"), p) }, false},
		{"file", func(p string) error { return os.WriteFile(p, []byte("not a snapshot"), 0o644) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			final := filepath.Join(dir, FileName(9))
			if err := tc.make(final); err != nil {
				t.Fatal(err)
			}
			p, err := Write(context.Background(), dir, ix.Freeze(), Meta{Index: 9})
			if !tc.refused {
				if err != nil {
					t.Fatalf("write: %v", err)
				}
				if got, _ := loadSnap(t, p); got.Stats().HolderBlocks != ix.Stats().HolderBlocks {
					t.Fatalf("loaded %+v, want %+v", got.Stats(), ix.Stats())
				}
				return
			}
			if err == nil || !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), final) || !strings.Contains(err.Error(), "move it out of "+dir) {
				t.Fatalf("write over a directory: %v, want a refusal naming %s and saying to move it out", err, final)
			}
			if temps, _ := TempFiles(dir); len(temps) != 0 {
				t.Fatalf("refused write left %v", temps)
			}
			if fi, err := os.Stat(final); err != nil || !fi.IsDir() {
				t.Fatalf("the directory is gone: %v", err)
			}
		})
	}
}

// TestCheckWritable: the check a start makes of its snapshot directory
// leaves nothing behind where it passes, and names the directory where it
// fails; a probe a crash left is a temporary file CleanTemp removes.
func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritable(dir); err != nil {
		t.Fatalf("CheckWritable of a writable dir: %v", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("after CheckWritable the dir holds %v (%v); want nothing", ents, err)
	}
	missing := filepath.Join(dir, "missing")
	if err := CheckWritable(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("CheckWritable of a missing dir: %v; want an error naming it", err)
	}
	left := filepath.Join(dir, ".snapshot-probe.tmp-123")
	if err := os.WriteFile(left, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if removed, err := CleanTemp(dir); err != nil || len(removed) != 1 || removed[0] != left {
		t.Errorf("CleanTemp removed %v (%v); want the probe a crash left", removed, err)
	}
}
