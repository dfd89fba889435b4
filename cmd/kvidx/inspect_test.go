package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

// The small fixture data directory, testdata/datadir-small, is built by
//
//	KVIDX_UPDATE_FIXTURE=1 go test ./cmd/kvidx -run TestGenerateFixture
//
// and the golden outputs in testdata/inspect by
//
//	go test ./cmd/kvidx -run TestInspectGolden -update
//
// (see testdata/README-datadir-small.md). The fixture's snapshot creation times are in the
// files, so the goldens change whenever the fixture is rebuilt.
var update = flag.Bool("update", false, "rewrite the golden files of testdata/inspect")

const (
	fixtureDir = "../../testdata/datadir-small"
	goldenDir  = "../../testdata/inspect"
	fixSnapA   = fixtureDir + "/snapshots/snapshot-00000000000000000030.bolt"
	fixSnapB   = fixtureDir + "/snapshots/snapshot-00000000000000000050.bolt"
)

// genHistory returns n deterministic batches of events over worker keys
// 1/0, 2/0, 2/1 and 3/0: chains of stored blocks (tokens hashes from a
// small pool, so workers share entries; block hashes follow the router
// chain for some workers, are arbitrary for others), removals (some of
// unknown blocks), a clear, a worker removal and events with unknown
// parents (rejected).
func genHistory(seed uint64, n int) [][]engine.Event {
	rng := rand.New(rand.NewPCG(seed, 7))
	keys := []engine.WorkerKey{{WorkerID: 1}, {WorkerID: 2}, {WorkerID: 2, DPRank: 1}, {WorkerID: 3}}
	held := map[engine.WorkerKey][]uint64{} // block hashes, in store order
	var id uint64
	out := make([][]engine.Event, n)
	for b := range out {
		for range 1 + rng.IntN(3) {
			k := keys[rng.IntN(len(keys))]
			id++
			ev := engine.Event{Worker: k, EventID: id}
			switch r := rng.IntN(20); {
			case r < 13:
				ev.Kind = engine.KindStored
				hs := held[k]
				var prevSeq uint64
				if len(hs) > 0 && rng.IntN(4) > 0 {
					ev.HasParent, ev.ParentHash = true, hs[len(hs)-1]
				}
				if r == 12 {
					ev.HasParent, ev.ParentHash = true, 999999 // unknown: rejected
				}
				for i := range 1 + rng.IntN(4) {
					th := uint64(100 + rng.IntN(12))
					bh := rng.Uint64() >> 8
					if k.WorkerID == 1 { // chained names, like Dynamo's engines
						if i == 0 && !ev.HasParent {
							bh = th
						} else if i == 0 {
							bh = engine.NextSeq(ev.ParentHash, th)
						} else {
							bh = engine.NextSeq(prevSeq, th)
						}
					}
					prevSeq = bh
					ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: bh, TokensHash: th})
				}
				if r != 12 {
					for _, bl := range ev.Blocks {
						held[k] = append(held[k], bl.BlockHash)
					}
				}
			case r < 18:
				ev.Kind = engine.KindRemoved
				hs := held[k]
				if len(hs) > 0 {
					i := rng.IntN(len(hs))
					ev.BlockHashes = []uint64{hs[i]}
					held[k] = append(hs[:i:i], hs[i+1:]...)
				} else {
					ev.BlockHashes = []uint64{424242} // unknown
				}
			case r < 19:
				ev.Kind = engine.KindCleared
				held[k] = nil
			default:
				ev.Kind = engine.KindWorkerRemoved
				for _, kk := range keys {
					if kk.WorkerID == k.WorkerID {
						held[kk] = nil
					}
				}
			}
			out[b] = append(out[b], ev)
		}
	}
	return out
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func openStore(t *testing.T, dir string) *recovery.Store {
	t.Helper()
	s, err := recovery.Open(context.Background(), dir, recovery.Options{Sync: wal.SyncNone, SegmentSize: 2048, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func appendAll(t *testing.T, s *recovery.Store, batches [][]engine.Event, firstSeq uint64) {
	t.Helper()
	for i, b := range batches {
		if _, _, err := s.Append(context.Background(), b, []wal.Position{{Source: "fixture", Seq: firstSeq + uint64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// buildDataDir writes the fixture's history into dir: 30 entries, a
// snapshot, 20 entries, a snapshot (the WAL is truncated to 31..), 10
// entries, then a torn tail on the last segment.
func buildDataDir(t *testing.T, dir string) {
	t.Helper()
	h := genHistory(1, 60)
	s := openStore(t, dir)
	appendAll(t, s, h[:30], 1)
	if _, _, err := s.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendAll(t, s, h[30:50], 31)
	if _, _, err := s.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendAll(t, s, h[50:], 51)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lay, err := wal.Inspect(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(dir, "wal", lay.Segments[len(lay.Segments)-1].Name)
	f, err := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A torn entry: a length of 40 bytes, 11 of them written.
	if _, err := f.Write([]byte{40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestGenerateFixture(t *testing.T) {
	if os.Getenv("KVIDX_UPDATE_FIXTURE") == "" {
		t.Skip("set KVIDX_UPDATE_FIXTURE=1 to rebuild testdata/datadir-small")
	}
	if err := os.RemoveAll(fixtureDir); err != nil {
		t.Fatal(err)
	}
	buildDataDir(t, fixtureDir)
}

// checkGolden compares got with testdata/inspect/name, or rewrites it under -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestInspectGolden(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		{"summary-snapshot.txt", []string{"inspect", "summary", fixSnapB}},
		{"summary-snapshot.json", []string{"inspect", "summary", fixSnapB, "--json"}},
		{"summary-datadir.txt", []string{"inspect", "summary", fixtureDir}},
		{"summary-datadir.json", []string{"inspect", "summary", fixtureDir, "--json"}},
		{"entries-all.txt", []string{"inspect", "entries", fixSnapB}},
		{"entries-worker2-pos1-3.txt", []string{"inspect", "entries", fixSnapB, "--worker", "2", "--from", "1", "--to", "3"}},
		{"entries-worker2-1.ndjson", []string{"inspect", "entries", fixSnapB, "--worker", "2/1", "--json"}},
		{"entries-tokens-hash-limit.ndjson", []string{"inspect", "entries", fixSnapB, "--tokens-hash", "105", "--limit", "3", "--json"}},
		{"diff-list.txt", []string{"inspect", "diff", fixSnapA, fixSnapB, "--list"}},
		{"diff.txt", []string{"inspect", "diff", fixSnapA, fixSnapB}},
		{"diff.json", []string{"inspect", "diff", fixSnapA, fixSnapB, "--json"}},
		{"verify.txt", []string{"inspect", "verify", fixSnapB}},
		{"verify.json", []string{"inspect", "verify", fixSnapB, "--json"}},
		{"match-local-hashes.json", []string{"inspect", "match", fixSnapB, "--local-hashes", "101,106,110"}},
		{"wal-dump.ndjson", []string{"wal", "dump", fixtureDir}},
		{"wal-dump-55-57.ndjson", []string{"wal", "dump", fixtureDir, "--from", "55", "--to", "57"}},
		{"wal-stat.txt", []string{"wal", "stat", fixtureDir}},
		{"wal-stat.json", []string{"wal", "stat", fixtureDir, "--json"}},
		{"recover-dry-run.txt", []string{"recover", "--data-dir", fixtureDir, "--dry-run"}},
		{"recover-dry-run.json", []string{"recover", "--data-dir", fixtureDir, "--dry-run", "--json"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			out, stderr, err := runKvidx(t, "", tt.args...)
			if err != nil {
				t.Fatalf("%v\nstderr: %s", err, stderr)
			}
			checkGolden(t, tt.golden, out)
		})
	}
}

// hashTree returns the sha256 of every file under dir.
func hashTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[p] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadOnlyOnRunningServer runs every read-only command on the directory
// of an open Store (which holds the lock) and checks that no file changed.
func TestReadOnlyOnRunningServer(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, fixtureDir, dir)
	s := openStore(t, dir) // cuts the torn tail, holds the lock
	defer s.Close()
	appendAll(t, s, genHistory(2, 5), 100)
	before := hashTree(t, dir)
	snap := filepath.Join(dir, "snapshots", "snapshot-00000000000000000050.bolt")
	for _, args := range [][]string{
		{"inspect", "summary", snap},
		{"inspect", "summary", dir, "--json"},
		{"inspect", "entries", snap, "--worker", "1"},
		{"inspect", "verify", snap},
		{"inspect", "diff", filepath.Join(dir, "snapshots", "snapshot-00000000000000000030.bolt"), snap},
		{"inspect", "match", snap, "--local-hashes", "100,101"},
		{"wal", "dump", dir},
		{"wal", "stat", dir},
		{"recover", "--data-dir", dir, "--dry-run"},
	} {
		if _, stderr, err := runKvidx(t, "", args...); err != nil {
			t.Fatalf("%v: %v\nstderr: %s", args, err, stderr)
		}
	}
	after := hashTree(t, dir)
	if len(before) != len(after) {
		t.Fatalf("files before %v, after %v", before, after)
	}
	for p, h := range before {
		if after[p] != h {
			t.Errorf("%s changed", p)
		}
	}
	// The store still works, and recover without --dry-run refuses: locked.
	appendAll(t, s, genHistory(3, 1), 200)
	if _, _, err := runKvidx(t, "", "recover", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "server running") {
		t.Fatalf("recover on a locked directory: %v", err)
	}
}

// TestWALDumpReplay checks that `wal dump | replay` scores like the live index.
func TestWALDumpReplay(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	h := genHistory(42, 300)
	appendAll(t, s, h, 1)
	defer s.Close()
	// Queries: every stored chain's tokens hashes, and prefixes of the pool.
	var queries []string
	var want []string
	ix := s.Index()
	seen := map[string]bool{}
	for _, b := range h {
		for _, ev := range b {
			if ev.Kind != engine.KindStored || len(ev.Blocks) < 2 {
				continue
			}
			var local []uint64
			for _, bl := range ev.Blocks {
				local = append(local, bl.TokensHash)
			}
			q := `{"local_hashes":[` + joinUints(local) + `]}`
			if seen[q] {
				continue
			}
			seen[q] = true
			queries = append(queries, q)
			want = append(want, string(appendResult(ix.Match(local, nil), len(local))))
		}
	}
	dump, stderr, err := runKvidx(t, "", "wal", "dump", dir)
	if err != nil {
		t.Fatalf("dump: %v %s", err, stderr)
	}
	qf := filepath.Join(t.TempDir(), "queries.ndjson")
	if err := os.WriteFile(qf, []byte(strings.Join(queries, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runKvidx(t, dump, "replay", "--events", "-", "--queries", qf, "--stats")
	if err != nil {
		t.Fatalf("replay: %v %s", err, stderr)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) || len(want) < 20 {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	nonEmpty := 0
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("query %s: replay %s, live %s", queries[i], got[i], want[i])
		}
		if !strings.HasPrefix(want[i], `{"scores":[]`) {
			nonEmpty++
		}
	}
	if nonEmpty == 0 {
		t.Error("every answer is empty: the test proves nothing")
	}
	if st := statsOf(t, stderr); st != ix.Stats() {
		t.Errorf("replayed stats %+v, live %+v", st, ix.Stats())
	}
}

func joinUints(vs []uint64) string {
	var b []byte
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, v, 10)
	}
	return string(b)
}

func appendResult(scores []engine.Score, n int) []byte {
	return eventjson.AppendResult(nil, scores, n)
}

// A directory with no kvidx data (a mistyped path) is summarised as an
// empty index, with a note that says so.
func TestInspectSummaryNoData(t *testing.T) {
	_, stderr, err := runKvidx(t, "", "inspect", "summary", t.TempDir())
	if err != nil || !strings.Contains(stderr, "holds no kvidx data") {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
}

// A negative --limit is an error naming it (it listed every place, as 0 does).
func TestInspectEntriesLimit(t *testing.T) {
	for _, tc := range []struct {
		limit   string
		wantErr bool
		lines   int
	}{
		{"-1", true, 0},
		{"-100", true, 0},
		{"1", false, 1},
		{"2", false, 2},
	} {
		out, _, err := runKvidx(t, "", "inspect", "entries", fixSnapB, "--limit", tc.limit)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "--limit "+tc.limit) || out != "" {
				t.Errorf("--limit %s: err %v, out %q", tc.limit, err, out)
			}
			continue
		}
		if n := strings.Count(out, "\n"); err != nil || n != tc.lines {
			t.Errorf("--limit %s: %d lines, %v", tc.limit, n, err)
		}
	}
}
