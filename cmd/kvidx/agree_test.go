package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
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
			plans := map[bool]*recoveryPlan{}
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
