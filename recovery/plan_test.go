package recovery

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/rotest"
	"github.com/kvidx/kvidx/internal/snaptest"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// planDir makes dir a data directory of 40 entries with snapshots at 10
// and 20 (the WAL is truncated up to 10) and returns its snapshot path at
// index n.
func planDir(t *testing.T, dir string) func(n uint64) string {
	t.Helper()
	opts := testOptions()
	opts.SegmentSize = 2048
	writeHistory(t, dir, opts, 3, 40, 10, 20)
	return func(n uint64) string { return filepath.Join(dir, SnapshotDirName, snapshot.FileName(n)) }
}

// Plan predicts what Open does, with and without loading the snapshots:
// the refusal, the snapshot used, the entries replayed, the snapshots
// skipped, the temporary files removed; and with Load, the index Open
// recovers.
func TestPlanTable(t *testing.T) {
	tests := []struct {
		name    string
		shape   func(t *testing.T, dir string, snap func(uint64) string)
		used    uint64 // 0: none
		from    uint64 // replay from (to is 40); 0: no replay checked
		skipped int
		temps   []string
		refusal string // a part of it; "": none
		upgrade int    // the plan's FormatUpgrade, and FORMAT's version after Open
	}{
		{name: "whole", shape: func(*testing.T, string, func(uint64) string) {}, used: 20, from: 21},
		{name: "format 1", shape: func(t *testing.T, dir string, _ func(uint64) string) {
			if err := os.WriteFile(filepath.Join(dir, FormatFileName), []byte("kvidx-data 1\n"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, used: 20, from: 21, upgrade: FormatVersion},
		{name: "newest damaged", shape: func(t *testing.T, _ string, snap func(uint64) string) {
			if err := os.Truncate(snap(20), 100); err != nil {
				t.Fatal(err)
			}
		}, used: 10, from: 11, skipped: 1},
		{name: "no snapshot yet", shape: func(t *testing.T, dir string, _ func(uint64) string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			writeHistory(t, dir, testOptions(), 3, 40)
		}, used: 0, from: 1},
		{name: "temp file", shape: func(t *testing.T, dir string, _ func(uint64) string) {
			if err := os.WriteFile(filepath.Join(dir, SnapshotDirName, ".snapshot-00000000000000000070.bolt.tmp-1"), []byte("x"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, used: 20, from: 21, temps: []string{".snapshot-00000000000000000070.bolt.tmp-1"}},
		{name: "snapshots gone", shape: func(t *testing.T, dir string, _ func(uint64) string) {
			if err := os.RemoveAll(filepath.Join(dir, SnapshotDirName)); err != nil {
				t.Fatal(err)
			}
		}, refusal: "snapshot"},
		{name: "newer format", shape: func(t *testing.T, dir string, _ func(uint64) string) {
			if err := os.WriteFile(filepath.Join(dir, FormatFileName), []byte("kvidx-data 99\n"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, refusal: "99"},
		{name: "lock file is a directory", shape: func(t *testing.T, dir string, _ func(uint64) string) {
			lock := filepath.Join(dir, WALDirName, wal.LockFileName)
			if err := os.Remove(lock); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(lock, 0o750); err != nil {
				t.Fatal(err)
			}
		}, refusal: "is a directory, not a regular file"},
		{name: "newest past the WAL's end", shape: func(t *testing.T, _ string, snap func(uint64) string) {
			if err := os.Rename(snap(20), snap(90)); err != nil {
				t.Fatal(err)
			}
			writeMetaSnapshot(t, 90, snap(90))
		}, refusal: "90"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			tt.shape(t, dir, planDir(t, dir))
			plans := map[bool]*RecoveryPlan{}
			var planned *engine.Index
			for _, load := range []bool{false, true} {
				var begun, ended, steps int
				opts := PlanOptions{Load: load, Progress: func(f snapshot.File, places int) (func(done, total int), func()) {
					begun++
					if !load && places <= 0 {
						t.Errorf("verification of %s begins with %d places", f.Path, places)
					}
					return func(done, total int) { steps++ }, func() { ended++ }
				}}
				p, ix, err := Plan(ctx, dir, opts)
				if err != nil {
					t.Fatalf("Plan(load=%v): %v", load, err)
				}
				if begun != ended || (tt.used != 0 && steps == 0) {
					t.Errorf("load=%v: %d checks begun, %d ended, %d steps", load, begun, ended, steps)
				}
				if (ix != nil) != (load && p.Refusal == "") {
					t.Errorf("load=%v, refusal %q: index returned: %v", load, p.Refusal, ix != nil)
				}
				plans[load] = p
				if ix != nil {
					// A plan read back from kvidx's JSON replays as well:
					// Replay is given the directory, which JSON lacks.
					var decoded RecoveryPlan
					if b, err := json.Marshal(p); err != nil {
						t.Fatal(err)
					} else if err := json.Unmarshal(b, &decoded); err != nil {
						t.Fatal(err)
					}
					entries := uint64(0)
					if _, _, err := decoded.Replay(dir, ix, func() { entries++ }); err != nil {
						t.Fatalf("Replay: %v", err)
					}
					if entries != p.ReplayEntries {
						t.Errorf("Replay reported %d entries, the plan has %d", entries, p.ReplayEntries)
					}
					planned = ix
				}
			}
			s, oerr := Open(ctx, dir, testOptions())
			if (oerr != nil) != (tt.refusal != "") {
				t.Fatalf("Open: %v; the plan's refusal: %q", oerr, plans[false].Refusal)
			}
			if oerr == nil {
				rep := s.Report()
				sameState(t, planned, s.Index())
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if v, err := CheckFormat(dir); tt.upgrade != 0 && (err != nil || v != tt.upgrade) {
					t.Errorf("FORMAT after Open: version %d, error %v; want version %d", v, err, tt.upgrade)
				}
				if rep.SnapshotUsed.Index != tt.used || rep.ReplayedEntries != 40-tt.from+1 || len(rep.SnapshotsSkipped) != tt.skipped {
					t.Errorf("Open: %+v, want snapshot %d, replay from %d, %d skipped", rep, tt.used, tt.from, tt.skipped)
				}
			}
			for load, p := range plans {
				if p.WriteProblem != "" || p.FormatUpgrade != tt.upgrade {
					t.Errorf("load=%v: write problem %q, format upgrade %d; want none, %d", load, p.WriteProblem, p.FormatUpgrade, tt.upgrade)
				}
				if tt.refusal != "" {
					if !strings.Contains(p.Refusal, tt.refusal) {
						t.Errorf("load=%v: refusal %q, want one naming %q", load, p.Refusal, tt.refusal)
					}
					continue
				}
				if p.Refusal != "" {
					t.Fatalf("load=%v: refusal %q", load, p.Refusal)
				}
				var used uint64
				if p.SnapshotUsed != nil {
					used = p.SnapshotUsed.Index
					if p.SnapshotUsed.Meta.Index != used || p.SnapshotUsed.File != snapshot.FileName(used) {
						t.Errorf("load=%v: snapshot used %+v", load, p.SnapshotUsed)
					}
				}
				if used != tt.used || p.ReplayFrom != tt.from || p.ReplayTo != 40 || p.ReplayEntries != 40-tt.from+1 {
					t.Errorf("load=%v: uses %d, replays %d..%d (%d), want %d, %d..40", load, used, p.ReplayFrom, p.ReplayTo, p.ReplayEntries, tt.used, tt.from)
				}
				if len(p.Skipped) != tt.skipped {
					t.Errorf("load=%v: skipped %+v, want %d", load, p.Skipped, tt.skipped)
				}
				if want := tt.temps; !slices.Equal(p.TempFiles, append([]string{}, want...)) {
					t.Errorf("load=%v: temp files %q, want %q", load, p.TempFiles, want)
				}
			}
		})
	}
}

// Plan's errors are for a directory it cannot read, naming it; a refusal
// is in the plan.
func TestPlanErrorsTable(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		noDir     bool
		want      string
	}{
		{"missing", filepath.Join(root, "missing"), true, "data dir " + filepath.Join(root, "missing") + " does not exist"},
		{"a file", file, false, "data dir " + file + " is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, load := range []bool{false, true} {
				p, ix, err := Plan(context.Background(), tt.dir, PlanOptions{Load: load})
				if err == nil || err.Error() != tt.want || errors.Is(err, ErrNoDataDir) != tt.noDir || errors.Is(err, fs.ErrNotExist) != tt.noDir || p != nil || ix != nil {
					t.Errorf("load=%v: plan %v, index %v, error %v; want error %q (ErrNoDataDir and fs.ErrNotExist: %v)", load, p, ix, err, tt.want, tt.noDir)
				}
			}
			err := CheckDataDir(tt.dir)
			if err == nil || err.Error() != tt.want || errors.Is(err, ErrNoDataDir) != tt.noDir || errors.Is(err, fs.ErrNotExist) != tt.noDir {
				t.Errorf("CheckDataDir: error %v; want %q (ErrNoDataDir and fs.ErrNotExist: %v)", err, tt.want, tt.noDir)
			}
		})
	}
}

// lastSegment, in TestPlanNotWritableTable's paths, stands for the name of
// the WAL's last segment file.
const lastSegment = "LAST-SEGMENT"

// A data directory this process cannot write where a restart must (a
// read-only mount; see rotest.ReadOnly) makes a restart fail at once,
// whatever the data: at the WAL's lock file, at the WAL's last segment
// (which it appends to, and cuts a torn tail from), or at snapshots/ (which
// Open checks first: it failed only at the first snapshot, and the plan
// had predicted a clean restart). The plan says so, naming the path and
// why, where it predicted a clean restart; it is no refusal of the data;
// and Open fails, naming the path too.
func TestPlanNotWritableTable(t *testing.T) {
	const atLock = "(the WAL's lock file is opened for writing first)"
	tests := []struct {
		name     string
		readOnly string // the path made read-only, under the data directory ("": itself)
		named    string // the path the plan names, likewise
		why      string // in the write problem: why a restart writes there
		existing bool   // a data directory with data; else an empty new one
		torn     bool   // a torn tail ends the WAL's last segment
	}{
		{"data directory", "", WALDirName, atLock, true, false},
		{"wal", WALDirName, WALDirName, atLock, true, false},
		{"lock file", filepath.Join(WALDirName, wal.LockFileName), filepath.Join(WALDirName, wal.LockFileName), atLock, true, false},
		{"new directory", "", "", atLock, false, false},
		{"snapshots", SnapshotDirName, SnapshotDirName, "(snapshots are written there", true, false},
		{"last segment", filepath.Join(WALDirName, lastSegment), filepath.Join(WALDirName, lastSegment), "to append to it)", true, false},
		{"torn last segment", filepath.Join(WALDirName, lastSegment), filepath.Join(WALDirName, lastSegment), "cuts the torn tail", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			if tt.existing {
				planDir(t, dir)
			}
			walDir := filepath.Join(dir, WALDirName)
			var last string
			if segs, err := wal.Segments(walDir); err == nil && len(segs) > 0 {
				last = segs[len(segs)-1].Name
			}
			if tt.torn {
				f, err := os.OpenFile(filepath.Join(walDir, last), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Write([]byte{0x40, 0x01, 0x02, 0x03}); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}
			path := func(rel string) string { return filepath.Join(dir, strings.Replace(rel, lastSegment, last, 1)) }
			ro, named := path(tt.readOnly), path(tt.named)
			rotest.ReadOnly(t, ro)
			for _, load := range []bool{false, true} {
				p, _, err := Plan(ctx, dir, PlanOptions{Load: load})
				if err != nil {
					t.Fatalf("Plan(load=%v): %v", load, err)
				}
				if !strings.HasPrefix(p.WriteProblem, named+" is not writable") || !strings.Contains(p.WriteProblem, tt.why) || p.Refusal != "" {
					t.Errorf("load=%v: write problem %q, refusal %q; want %s named not writable, with %q, no refusal", load, p.WriteProblem, p.Refusal, named, tt.why)
				}
				if tt.existing && (p.SnapshotUsed == nil || p.SnapshotUsed.Index != 20 || p.ReplayEntries != 20 || (p.WAL.TornBytes > 0) != tt.torn) {
					t.Errorf("load=%v: snapshot %+v, %d entries to replay, %d torn bytes; want what the data makes of a restart", load, p.SnapshotUsed, p.ReplayEntries, p.WAL.TornBytes)
				}
			}
			s, err := Open(ctx, dir, testOptions())
			if err == nil {
				s.Close()
				t.Fatalf("Open of a directory with %s read-only succeeded", ro)
			}
			if !strings.Contains(err.Error(), named) {
				t.Errorf("Open: %v; want an error naming %s", err, named)
			}
		})
	}
}

// TestPlanDanglingSnapshotsLink: a snapshots/ that is a symbolic link to a
// missing directory fails a start at once (it cannot be made); the plan
// said the restart would work.
func TestPlanDanglingSnapshotsLink(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	planDir(t, dir)
	snapDir := filepath.Join(dir, SnapshotDirName)
	if err := os.RemoveAll(snapDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gone"), snapDir); err != nil {
		t.Fatal(err)
	}
	p, _, err := Plan(ctx, dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.WriteProblem, snapDir+" is a symbolic link to") {
		t.Errorf("write problem %q; want one naming %s as a link to a missing directory", p.WriteProblem, snapDir)
	}
	s, err := Open(ctx, dir, testOptions())
	if err == nil {
		s.Close()
		t.Fatal("Open with a dangling snapshots link succeeded; the plan's prediction no longer holds")
	}
	if !strings.Contains(err.Error(), snapDir) {
		t.Errorf("Open: %v; want an error naming %s", err, snapDir)
	}
}

// TestPlanOnBusyServer plans recovery (as `inspect summary DATA_DIR` and
// `recover --dry-run` do) again and again while a server appends, writes
// snapshots, prunes and truncates its WAL: a segment or snapshot that goes
// away between listing and reading is the server at work, not a reason to
// fail or to report a restart that would refuse.
func TestPlanOnBusyServer(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.SegmentSize = 2048
	s := mustOpen(t, dir, opts)
	defer s.Close()
	h := batches(4, 1, 4000)
	for i, b := range h[:20] {
		mustAppend(t, s, b, wal.Position{Source: "fixture", Seq: uint64(i + 1)})
	}
	if _, _, err := s.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 20; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := s.Append(context.Background(), h[20+i%3900], []wal.Position{{Source: "x", Seq: uint64(i)}}); err != nil {
				t.Error(err)
				return
			}
			if i%3 == 0 {
				if _, _, err := s.Snapshot(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	var bad []string
	for range 3000 {
		p, _, err := Plan(context.Background(), dir, PlanOptions{})
		switch {
		case err != nil:
			bad = append(bad, err.Error())
		case p.Refusal != "":
			bad = append(bad, "refusal: "+p.Refusal)
		case p.SnapshotUsed == nil:
			bad = append(bad, "no snapshot used")
		}
	}
	close(stop)
	<-done
	if len(bad) > 0 {
		t.Fatalf("%d of 3000 plans of a healthy running server's directory failed, e.g. %s", len(bad), bad[0])
	}
}

// MoveAsideDamaged sets aside the damaged snapshots past a cut, newest
// first up to one that verifies, and refuses one that is not known to be
// damaged or a WAL directory a kvidx holds.
func TestMoveAsideDamagedTable(t *testing.T) {
	tests := []struct {
		name  string
		after uint64
		shape func(t *testing.T, dir string, snap func(uint64) string) func()
		moved []uint64 // snapshots renamed *.damaged
		left  []uint64 // snapshots returned
		err   string   // a part of the error; "": none
		isErr error
	}{
		{name: "newest verifies", after: 15, left: []uint64{20, 10}},
		{name: "none past the cut", after: 25, shape: func(t *testing.T, _ string, snap func(uint64) string) func() {
			flipMiddle(t, snap(20))
			return nil
		}, left: []uint64{20, 10}},
		{name: "newest damaged", after: 15, shape: func(t *testing.T, _ string, snap func(uint64) string) func() {
			if err := os.Truncate(snap(20), 100); err != nil {
				t.Fatal(err)
			}
			return nil
		}, moved: []uint64{20}, left: []uint64{10}},
		{name: "both damaged", after: 5, shape: func(t *testing.T, _ string, snap func(uint64) string) func() {
			for _, n := range []uint64{20, 10} {
				if err := os.Truncate(snap(n), 100); err != nil {
					t.Fatal(err)
				}
			}
			return nil
		}, moved: []uint64{20, 10}, left: []uint64{}},
		{name: "newest of another build's format", after: 15, shape: func(t *testing.T, _ string, snap func(uint64) string) func() {
			snaptest.SetMeta(t, snap(20), "format", binary.BigEndian.AppendUint32(nil, snapshot.FormatVersion+1))
			return nil
		}, err: "is not known to be damaged"},
		{name: "WAL held", after: 15, shape: func(t *testing.T, dir string, snap func(uint64) string) func() {
			if err := os.Truncate(snap(20), 100); err != nil {
				t.Fatal(err)
			}
			lock, err := wal.LockDir(filepath.Join(dir, WALDirName))
			if err != nil {
				t.Fatal(err)
			}
			return func() { lock.Unlock() }
		}, isErr: wal.ErrLocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			snap := planDir(t, dir)
			if tt.shape != nil {
				if done := tt.shape(t, dir, snap); done != nil {
					defer done()
				}
			}
			snaps, err := snapshot.List(filepath.Join(dir, SnapshotDirName))
			if err != nil {
				t.Fatal(err)
			}
			var moved []uint64
			left, err := MoveAsideDamaged(context.Background(), filepath.Join(dir, WALDirName), snaps, tt.after, func(f snapshot.File, damage error) {
				if !errors.Is(damage, snapshot.ErrCorrupt) {
					t.Errorf("%s moved aside for %v", f.Path, damage)
				}
				moved = append(moved, f.Index)
			})
			switch {
			case tt.err != "" || tt.isErr != nil:
				if err == nil || !strings.Contains(err.Error(), tt.err) || (tt.isErr != nil && !errors.Is(err, tt.isErr)) {
					t.Fatalf("error %v, want one saying %q (%v)", err, tt.err, tt.isErr)
				}
			case err != nil:
				t.Fatal(err)
			}
			var indexes []uint64
			for _, f := range left {
				indexes = append(indexes, f.Index)
			}
			if !slices.Equal(moved, tt.moved) || (err == nil && !slices.Equal(indexes, tt.left)) {
				t.Errorf("moved %v, left %v; want %v, %v", moved, indexes, tt.moved, tt.left)
			}
			for _, f := range snaps {
				_, serr := os.Stat(f.Path + DamagedSuffix)
				if aside := serr == nil; aside != slices.Contains(tt.moved, f.Index) {
					t.Errorf("%s moved aside: %v", f.Path, aside)
				}
			}
		})
	}
}

// CoveringSnapshot finds the newest snapshot that verifies and holds every
// entry before the cut, or says why none does.
func TestCoveringSnapshotTable(t *testing.T) {
	tests := []struct {
		name   string
		before uint64
		shape  func(t *testing.T, snap func(uint64) string)
		want   uint64   // the snapshot found; 0: an error
		err    []string // parts of the error
		// canceled: ctx is done before the call; the error must wrap
		// context.Canceled, not say that no snapshot verifies.
		canceled bool
	}{
		{name: "index 0", before: 0, err: []string{"WAL indexes start at 1"}},
		{name: "just after the newest", before: 21, want: 20},
		{name: "well before the newest", before: 11, want: 20},
		{name: "past every snapshot", before: 22, err: []string{"no snapshot of", "at WAL index 21 or later verifies, so removing the entries before 22 would lose them"}},
		{name: "newest damaged", before: 21, shape: func(t *testing.T, snap func(uint64) string) {
			if err := os.Truncate(snap(20), 100); err != nil {
				t.Fatal(err)
			}
		}, err: []string{"at WAL index 20 or later verifies", "(" + snapshot.FileName(20) + ": "}},
		{name: "newest damaged, an older one holds them", before: 11, shape: func(t *testing.T, snap func(uint64) string) {
			if err := os.Truncate(snap(20), 100); err != nil {
				t.Fatal(err)
			}
		}, want: 10},
		{name: "misnamed copy", before: 25, shape: func(t *testing.T, snap func(uint64) string) {
			b, err := os.ReadFile(snap(10))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(snap(30), b, 0o640); err != nil {
				t.Fatal(err)
			}
		}, err: []string{snapshot.FileName(30) + ": its meta says WAL index 10"}},
		{name: "interrupted", before: 11, canceled: true, err: []string{"verifying snapshot", snapshot.FileName(20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			snap := planDir(t, dir)
			if tt.shape != nil {
				tt.shape(t, snap)
			}
			ctx, cancel := context.WithCancel(context.Background())
			if tt.canceled {
				cancel()
			}
			f, err := CoveringSnapshot(ctx, dir, tt.before)
			cancel()
			if errors.Is(err, context.Canceled) != tt.canceled {
				t.Errorf("canceled %v: error %v", tt.canceled, err)
			}
			if tt.want != 0 {
				if err != nil || f.Index != tt.want {
					t.Fatalf("found %+v, %v; want snapshot %d", f, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("found %+v, want an error", f)
			}
			for _, part := range tt.err {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not say %q", err, part)
				}
			}
		})
	}
}
