package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvidx/kvidx/internal/snaptest"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// For each directory shape, recover --dry-run's plan (with and without
// loading) and what recovery.Open then does agree: refusal, snapshot used,
// entries replayed, snapshots skipped.
func TestDryRunAgreesWithOpenTable(t *testing.T) {
	snap := func(dir string, n uint64) string { return filepath.Join(dir, "snapshots", snapshot.FileName(n)) }
	tests := []struct {
		name  string
		shape func(t *testing.T, dir string) func()
	}{
		{"fixture", func(t *testing.T, dir string) func() { return nil }},
		{"newest truncated", func(t *testing.T, dir string) func() { os.Truncate(snap(dir, 50), 8192); return nil }},
		{"newest tiny", func(t *testing.T, dir string) func() { os.Truncate(snap(dir, 50), 100); return nil }},
		{"newest flipped", func(t *testing.T, dir string) func() {
			b, _ := os.ReadFile(snap(dir, 50))
			for i := 2 * 4096; i < len(b); i++ {
				b[i] ^= 0x5a
			}
			os.WriteFile(snap(dir, 50), b, 0o644)
			return nil
		}},
		{"both damaged", func(t *testing.T, dir string) func() {
			os.Truncate(snap(dir, 50), 100)
			os.Truncate(snap(dir, 30), 100)
			return nil
		}},
		{"meta index disagrees", func(t *testing.T, dir string) func() { os.Rename(snap(dir, 50), snap(dir, 55)); return nil }},
		{"meta index disagrees lower", func(t *testing.T, dir string) func() { os.Rename(snap(dir, 50), snap(dir, 45)); return nil }},
		{"a copy named beyond the WAL's end", func(t *testing.T, dir string) func() {
			b, _ := os.ReadFile(snap(dir, 50))
			os.WriteFile(snap(dir, 99), b, 0o644)
			return nil
		}},
		{"snapshot at WAL end", func(t *testing.T, dir string) func() {
			b, _ := os.ReadFile(snap(dir, 50))
			os.WriteFile(snap(dir, 60), b, 0o644)
			return nil
		}},
		{"first segment gone", func(t *testing.T, dir string) func() {
			os.Remove(filepath.Join(dir, "wal", "00000000000000000031"))
			return nil
		}},
		{"first segment gone newest damaged", func(t *testing.T, dir string) func() {
			os.Remove(filepath.Join(dir, "wal", "00000000000000000031"))
			os.Truncate(snap(dir, 50), 100)
			return nil
		}},
		{"last segment gone", func(t *testing.T, dir string) func() {
			os.WriteFile(filepath.Join(dir, "wal", wal.TailMarkName), []byte("60\n"), 0o644)
			os.Remove(filepath.Join(dir, "wal", "00000000000000000060"))
			return nil
		}},
		{"wal gone", func(t *testing.T, dir string) func() { os.RemoveAll(filepath.Join(dir, "wal")); return nil }},
		{"snapshots gone", func(t *testing.T, dir string) func() { os.RemoveAll(filepath.Join(dir, "snapshots")); return nil }},
		{"temp file", func(t *testing.T, dir string) func() {
			os.WriteFile(filepath.Join(dir, "snapshots", ".snapshot-00000000000000000070.bolt.tmp-1"), []byte("x"), 0o644)
			return nil
		}},
		{"pending truncation", func(t *testing.T, dir string) func() {
			b, _ := os.ReadFile(filepath.Join(dir, "wal", "00000000000000000031"))
			os.WriteFile(filepath.Join(dir, "wal", "00000000000000000031.START"), b, 0o644)
			return nil
		}},
		{"newest locked", func(t *testing.T, dir string) func() {
			f, err := os.Open(snap(dir, 50))
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			return func() { f.Close() }
		}},
		{"newest of a newer format", func(t *testing.T, dir string) func() {
			snaptest.SetMeta(t, snap(dir, 50), "format", binary.BigEndian.AppendUint32(nil, snapshot.FormatVersion+1))
			return nil
		}},
		{"the WAL's lock file is a directory", func(t *testing.T, dir string) func() {
			os.Remove(filepath.Join(dir, "wal", "LOCK"))
			os.Mkdir(filepath.Join(dir, "wal", "LOCK"), 0o755)
			return nil
		}},
		{"snapshot dir entry is a directory", func(t *testing.T, dir string) func() {
			os.Mkdir(snap(dir, 55), 0o755)
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, fixtureDir, dir)
			if done := tt.shape(t, dir); done != nil {
				defer done()
			}
			ctx := context.Background()
			plans := map[bool]*recovery.RecoveryPlan{}
			for _, load := range []bool{false, true} {
				p, _, err := planRecovery(ctx, dir, load, nil)
				if err != nil {
					t.Fatalf("plan(load=%v): %v", load, err)
				}
				plans[load] = p
			}
			s, oerr := recovery.Open(ctx, dir, recovery.Options{Logger: quietLogger()})
			var rep recovery.Report
			if oerr == nil {
				rep = s.Report()
				s.Close()
			}
			for load, p := range plans {
				t.Logf("load=%v plan: used %+v skipped %+v replay %d..%d refusal %q", load, p.SnapshotUsed, p.Skipped, p.ReplayFrom, p.ReplayTo, p.Refusal)
				if (p.Refusal != "") != (oerr != nil) {
					t.Fatalf("load=%v: dry run refusal %q, Open error %v", load, p.Refusal, oerr)
				}
				if oerr != nil {
					continue
				}
				var used uint64
				if p.SnapshotUsed != nil {
					used = p.SnapshotUsed.Index
				}
				if used != rep.SnapshotUsed.Index || p.ReplayEntries != rep.ReplayedEntries || len(p.Skipped) != len(rep.SnapshotsSkipped) {
					t.Fatalf("load=%v: dry run uses %d, replays %d, skips %d; Open used %d, replayed %d, skipped %+v",
						load, used, p.ReplayEntries, len(p.Skipped), rep.SnapshotUsed.Index, rep.ReplayedEntries, rep.SnapshotsSkipped)
				}
			}
			if oerr != nil {
				t.Logf("Open: %v", oerr)
			} else {
				t.Logf("Open: used %d replayed %d skipped %+v", rep.SnapshotUsed.Index, rep.ReplayedEntries, rep.SnapshotsSkipped)
			}
		})
	}
}

// buildSegmentedDir writes 60 entries into dir through a Store with small
// WAL segments (five or so entries each), snapshots at 20 and 40, keeping
// keep snapshots (2: the WAL is truncated to 21..), and returns the WAL's
// segment files, oldest first, with their first indexes.
func buildSegmentedDir(t *testing.T, dir string, keep int) (names []string, firsts []uint64) {
	t.Helper()
	ctx := context.Background()
	h := genHistory(1, 60)
	s, err := recovery.Open(ctx, dir, recovery.Options{Sync: wal.SyncNone, SegmentSize: 300, KeepSnapshots: keep, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 20}, {20, 40}, {40, 60}} {
		appendAll(t, s, h[r[0]:r[1]], uint64(r[0]+1))
		if r[1] < 60 {
			if _, _, err := s.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lay, err := wal.Inspect(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sg := range lay.Segments {
		names, firsts = append(names, sg.Name), append(firsts, sg.FirstIndex)
	}
	return names, firsts
}

// With the WAL's segments missing, renamed or broken in several places,
// before and after the snapshots, recover --dry-run's plan and
// recovery.Open agree on the verdict, the snapshot used, the entries
// replayed and the snapshots skipped, and describe each gap in the same
// words: the plan's gaps and skip reasons are the ones Open gives (found
// by review: the plan took its texts from wal.Inspect, recovery from its
// own gap finder, and the two worded the same gap differently).
func TestDryRunAgreesWithOpenOnGapsTable(t *testing.T) {
	seg := func(dir, name string) string { return filepath.Join(dir, "wal", name) }
	snap := func(dir string, n uint64) string { return filepath.Join(dir, "snapshots", snapshot.FileName(n)) }
	// segAfter is the index in firsts of the first segment that starts
	// after index n and is not the last.
	segAfter := func(t *testing.T, firsts []uint64, n uint64) int {
		for i, f := range firsts[:len(firsts)-1] {
			if f > n {
				return i
			}
		}
		t.Fatalf("no segment after %d in %v", n, firsts)
		return 0
	}
	rename := func(dir, name string, first uint64, delta int) {
		os.Rename(seg(dir, name), seg(dir, fmt.Sprintf("%020d", int(first)+delta)))
	}
	tests := []struct {
		name  string
		keep  int
		shape func(t *testing.T, dir string, names []string, firsts []uint64)
	}{
		{"whole", 2, func(t *testing.T, dir string, names []string, firsts []uint64) {}},
		{"segment gone before the older snapshot", 3, func(t *testing.T, dir string, names []string, firsts []uint64) {
			os.Remove(seg(dir, names[1]))
		}},
		{"segment gone between the snapshots", 2, func(t *testing.T, dir string, names []string, firsts []uint64) {
			os.Remove(seg(dir, names[segAfter(t, firsts, 22)]))
		}},
		{"segment gone between the snapshots, newer damaged", 2, func(t *testing.T, dir string, names []string, firsts []uint64) {
			os.Remove(seg(dir, names[segAfter(t, firsts, 22)]))
			os.Truncate(snap(dir, 40), 100)
		}},
		{"segment gone between the snapshots, newer damaged, WAL from 1", 3, func(t *testing.T, dir string, names []string, firsts []uint64) {
			os.Remove(seg(dir, names[segAfter(t, firsts, 22)]))
			os.Truncate(snap(dir, 40), 100)
		}},
		{"segment gone after the newer snapshot", 2, func(t *testing.T, dir string, names []string, firsts []uint64) {
			os.Remove(seg(dir, names[segAfter(t, firsts, 41)]))
		}},
		{"both snapshots damaged, segment gone", 3, func(t *testing.T, dir string, names []string, firsts []uint64) {
			os.Remove(seg(dir, names[len(names)/2]))
			os.Truncate(snap(dir, 40), 100)
			os.Truncate(snap(dir, 20), 100)
		}},
		{"early segment renamed up", 3, func(t *testing.T, dir string, names []string, firsts []uint64) {
			rename(dir, names[2], firsts[2], 1)
		}},
		{"early segment renamed down", 3, func(t *testing.T, dir string, names []string, firsts []uint64) {
			rename(dir, names[2], firsts[2], -1)
		}},
		{"late segment renamed up", 2, func(t *testing.T, dir string, names []string, firsts []uint64) {
			i := len(names) - 2
			rename(dir, names[i], firsts[i], 1)
		}},
		{"late segment renamed down", 2, func(t *testing.T, dir string, names []string, firsts []uint64) {
			i := len(names) - 2
			rename(dir, names[i], firsts[i], -1)
		}},
		{"late segment cut short", 2, func(t *testing.T, dir string, names []string, firsts []uint64) {
			p := seg(dir, names[len(names)-2])
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			os.Truncate(p, fi.Size()-5)
		}},
		{"late segment with stray bytes", 3, func(t *testing.T, dir string, names []string, firsts []uint64) {
			f, err := os.OpenFile(seg(dir, names[len(names)-2]), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte{3, 1, 2})
			f.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			names, firsts := buildSegmentedDir(t, dir, tt.keep)
			tt.shape(t, dir, names, firsts)
			ctx := context.Background()
			var plans []*recovery.RecoveryPlan
			for _, load := range []bool{false, true} {
				p, _, err := planRecovery(ctx, dir, load, nil)
				if err != nil {
					t.Fatalf("plan(load=%v): %v", load, err)
				}
				plans = append(plans, p)
			}
			s, oerr := recovery.Open(ctx, dir, recovery.Options{Logger: quietLogger()})
			var rep recovery.Report
			if oerr == nil {
				rep = s.Report()
				s.Close()
			}
			for i, p := range plans {
				t.Logf("plan %d: used %+v skipped %+v replay %d..%d gaps %q refusal %q", i, p.SnapshotUsed, p.Skipped, p.ReplayFrom, p.ReplayTo, p.WAL.Gaps, p.Refusal)
				if (p.Refusal != "") != (oerr != nil) {
					t.Fatalf("plan %d: refusal %q, Open error %v", i, p.Refusal, oerr)
				}
				if oerr != nil {
					// Open's refusal lists what it found: the same gaps
					// and skip reasons, in the same words.
					if !strings.Contains(oerr.Error(), p.Refusal) {
						t.Errorf("plan %d: refusal %q not in Open's error %v", i, p.Refusal, oerr)
					}
					for _, g := range p.WAL.Gaps {
						if !strings.Contains(oerr.Error(), g) {
							t.Errorf("plan %d: gap %q not in Open's error %v", i, g, oerr)
						}
					}
					for _, sk := range p.Skipped {
						if !strings.Contains(oerr.Error(), "skipped: "+sk.Reason) {
							t.Errorf("plan %d: skip reason %q not in Open's error %v", i, sk.Reason, oerr)
						}
					}
					continue
				}
				var used uint64
				if p.SnapshotUsed != nil {
					used = p.SnapshotUsed.Index
				}
				if used != rep.SnapshotUsed.Index || p.ReplayEntries != rep.ReplayedEntries || len(p.Skipped) != len(rep.SnapshotsSkipped) {
					t.Fatalf("plan %d: uses %d, replays %d, skips %+v; Open used %d, replayed %d, skipped %+v",
						i, used, p.ReplayEntries, p.Skipped, rep.SnapshotUsed.Index, rep.ReplayedEntries, rep.SnapshotsSkipped)
				}
				for j, sk := range p.Skipped {
					if sk.Reason != rep.SnapshotsSkipped[j].Reason {
						t.Errorf("plan %d: skips %s because %q; Open because %q", i, sk.File, sk.Reason, rep.SnapshotsSkipped[j].Reason)
					}
				}
			}
			if oerr != nil {
				t.Logf("Open: %v", oerr)
			} else {
				t.Logf("Open: used %d replayed %d skipped %+v", rep.SnapshotUsed.Index, rep.ReplayedEntries, rep.SnapshotsSkipped)
			}
		})
	}
}
