package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

func TestWALRepair(t *testing.T) {
	data := t.TempDir()
	l, err := wal.Open(filepath.Join(data, "wal"), &wal.Options{Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: uint64(i + 1), TokensHash: 7}}}
		if _, err := l.Append(context.Background(), []engine.Event{ev}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no index", []string{"wal", "repair", data, "--yes"}, "--truncate-after INDEX, --truncate-before INDEX or --trim-stray is required"},
		{"both", []string{"wal", "repair", data, "--truncate-after", "3", "--truncate-before", "2", "--yes"}, "give one of"},
		{"trim and cut", []string{"wal", "repair", data, "--trim-stray", "--truncate-before", "2", "--yes"}, "give one of"},
		{"no yes, trim", []string{"wal", "repair", data, "--trim-stray"}, "trims the stray bytes"},
		{"nothing stray", []string{"wal", "repair", data, "--trim-stray", "--yes"}, "no segment ends in stray bytes"},
		{"no yes", []string{"wal", "repair", data, "--truncate-after", "3"}, "run again with --yes"},
		{"no yes, before", []string{"wal", "repair", data, "--truncate-before", "3"}, "every entry before 3"},
		{"before 0", []string{"wal", "repair", data, "--truncate-before", "0", "--yes"}, "WAL indexes start at 1"},
		{"no snapshot", []string{"wal", "repair", data, "--truncate-before", "3", "--yes"}, "no snapshot"},
		{"drop-unlocated with after", []string{"wal", "repair", data, "--truncate-after", "3", "--drop-unlocated", "--yes"}, "--drop-unlocated applies to --truncate-before"},
		{"after the last entry", []string{"wal", "repair", data, "--truncate-after", "5", "--yes"}, "entry 5 is the last, with nothing after it: nothing to cut"},
		{"no dir", []string{"wal", "repair"}, "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runKvidx(t, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
	backup := filepath.Join(t.TempDir(), "backup")
	out, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "3", "--yes", "--backup", backup)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "after entry 3") {
		t.Fatalf("output %q", out)
	}
	if entries, _ := os.ReadDir(backup); len(entries) == 0 {
		t.Fatal("nothing kept in the backup directory")
	}
	l, err = wal.Open(filepath.Join(data, "wal"), &wal.Options{Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if last, err := l.LastIndex(); err != nil || last != 3 {
		t.Fatalf("last index %d (%v) after the cut, want 3", last, err)
	}
}

// The operator's path for damage inside the log, end to end: recovery
// refuses to start, naming the segment file and the offset of the bad entry;
// `kvidx wal repair DATA_DIR --truncate-after INDEX --yes` cuts after the
// entry before it, keeping a copy of the segment it changes; the next start
// recovers exactly the entries kept and appends after them.
func TestWALRepairAfterMiddleDamage(t *testing.T) {
	data, opts, _ := repairDataDir(t, 8)
	// One segment holds every entry: flip a byte inside entry 5.
	seg := filepath.Join(data, "wal", fmt.Sprintf("%020d", 1))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	orig := bytes.Clone(b)
	off := 0
	for range 4 {
		size, hn := binary.Uvarint(b[off:])
		off += hn + int(size)
	}
	b[off+3] ^= 0x01 // a CRC byte of entry 5
	if err := os.WriteFile(seg, b, 0o640); err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(b)
	_, err = recovery.Open(context.Background(), data, opts)
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(seg)) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d:", off)) {
		t.Fatalf("open of a log damaged in the middle: %v, want ErrCorrupt naming %s and offset %d", err, filepath.Base(seg), off)
	}
	if got, _ := os.ReadFile(seg); !bytes.Equal(got, damaged) {
		t.Fatal("the refused open changed the segment")
	}
	// Before cutting, the entries before the damage can be dumped (it
	// failed: damage anywhere in the last segment ended every dump), with
	// a note of the damage; a dump reaching entry 5 fails.
	out, stderr, err := runKvidx(t, "", "wal", "dump", data, "--to", "4")
	if err != nil || strings.Count(out, "\n") != 4 || !strings.Contains(stderr, "damaged after --to 4") || !strings.Contains(stderr, "entry 5") {
		t.Fatalf("dump --to 4 of a log damaged at entry 5: %v\nstdout %q\nstderr %q", err, out, stderr)
	}
	if _, _, err := runKvidx(t, "", "wal", "dump", data, "--to", "5"); err == nil || !strings.Contains(err.Error(), "entry 5 is invalid") {
		t.Fatalf("dump --to 5 through the damage: %v", err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if _, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "4", "--yes", "--backup", backup); err != nil {
		t.Fatal(err)
	}
	if kept, err := os.ReadFile(filepath.Join(backup, filepath.Base(seg))); err != nil || !bytes.Equal(kept, damaged) {
		t.Fatalf("backup of the cut segment: %d bytes, %v; want the %d damaged bytes", len(kept), err, len(damaged))
	}
	if got, _ := os.ReadFile(seg); !bytes.Equal(got, orig[:off]) {
		t.Fatalf("segment after the cut: %d bytes, want the %d bytes of entries 1..4", len(got), off)
	}
	s, err := recovery.Open(context.Background(), data, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Report(); r.ReplayedEntries != 4 || r.LastIndex != 4 {
		t.Fatalf("report after the repair: %+v", r)
	}
	if st := s.Index().Stats(); st.HolderBlocks != 4 || st.Counters.EventsStored != 4 {
		t.Fatalf("index after the repair: %+v", st)
	}
	if idx, _, err := s.Append(context.Background(), nil, nil); err != nil || idx != 5 {
		t.Fatalf("append after the repair: %d, %v", idx, err)
	}
}

// TestWALRepairBeforeCoveredDamage: the damaged entry is one a snapshot
// already holds. Recovery refuses and names --truncate-before, which drops
// the entries up to that snapshot and loses nothing; --truncate-after would
// leave the log ending before the snapshot.
func TestWALRepairBeforeCoveredDamage(t *testing.T) {
	data, opts, evs := repairDataDir(t, 3, 1, 3)
	ctx := context.Background()
	// The WAL now starts at entry 2 (snapshot 1 covers entry 1): flip a CRC
	// byte of entry 2, which entry 3 follows.
	seg := filepath.Join(data, "wal", fmt.Sprintf("%020d", 2))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[3] ^= 0x01
	if err := os.WriteFile(seg, b, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = recovery.Open(ctx, data, opts)
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), "--truncate-before 4 --yes") {
		t.Fatalf("open: %v, want ErrCorrupt naming --truncate-before 4", err)
	}
	// Only the repair that works is named, with the real directory (it
	// also named --truncate-after, which wal repair then refuses, and
	// "DATA_DIR" beside the real path). Found by review.
	var de *wal.DamageError
	if msg := err.Error(); strings.Contains(msg, "--truncate-after") || strings.Contains(msg, "DATA_DIR") ||
		!strings.Contains(msg, "kvidx wal repair "+data+" --truncate-before 4 --yes") || !errors.As(err, &de) {
		t.Fatalf("open: %v", err)
	}
	t.Log(err)
	// The offline tools that predict a restart name the same cut.
	for _, args := range [][]string{{"recover", "--data-dir", data, "--dry-run"}, {"wal", "stat", data}} {
		out, _, _ := runKvidx(t, "", args...)
		if !strings.Contains(out, "--truncate-before 4 --yes") {
			t.Errorf("kvidx %v does not name --truncate-before 4:\n%s", args, out)
		}
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if _, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "1", "--yes", "--backup", backup); err == nil ||
		!strings.Contains(err.Error(), "use --truncate-before 4") {
		t.Fatalf("a cut that leaves the log behind a snapshot: %v, want a refusal naming --truncate-before 4", err)
	}
	if _, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-before", "10", "--yes", "--backup", backup); err == nil ||
		!strings.Contains(err.Error(), "no snapshot") {
		t.Fatalf("a cut no snapshot covers: %v, want a refusal", err)
	}
	stdout, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-before", "4", "--yes", "--backup", backup)
	if err != nil || !strings.Contains(stdout, "before entry 4") {
		t.Fatalf("repair: %v, %q", err, stdout)
	}
	if _, err := os.Stat(filepath.Join(backup, filepath.Base(seg))); err != nil {
		t.Fatalf("the cut segment was not kept: %v", err)
	}
	s, err := recovery.Open(ctx, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Report(); r.SnapshotUsed.Index != 3 || r.ReplayedEntries != 0 {
		t.Fatalf("report after the repair: %+v", r)
	}
	checkRepaired(t, s, evs, 4)
}

// checkRepaired checks a store opened after a repair: its index is that of
// evs, and its next append gets index next.
func checkRepaired(t *testing.T, s *recovery.Store, evs []engine.Event, next uint64) {
	t.Helper()
	want := engine.New()
	for i := range evs {
		want.Apply(&evs[i])
	}
	if got := s.Index().Stats(); got != want.Stats() {
		t.Fatalf("index after the repair: %+v, want %+v", got, want.Stats())
	}
	if idx, _, err := s.Append(context.Background(), nil, nil); err != nil || idx != next {
		t.Fatalf("append after the repair: %d, %v; want %d", idx, err, next)
	}
}

// A data directory whose wal/ was lost, with a snapshot holding every
// entry: recovery refuses and names --truncate-before, and that repair
// (which failed: "no wal/ directory") gives a log that continues after the
// snapshot.
func TestWALRepairBeforeLostWAL(t *testing.T) {
	data, opts, evs := repairDataDir(t, 3, 1, 3)
	ctx := context.Background()
	if err := os.RemoveAll(filepath.Join(data, "wal")); err != nil {
		t.Fatal(err)
	}
	out, _, _ := runKvidx(t, "", "recover", "--data-dir", data, "--dry-run")
	if !strings.Contains(out, "--truncate-before 4 --yes") {
		t.Fatalf("recover --dry-run does not name --truncate-before 4:\n%s", out)
	}
	// --truncate-after has nothing to cut in a lost log.
	if _, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "3", "--yes"); err == nil || !strings.Contains(err.Error(), "no wal/ directory") {
		t.Fatalf("--truncate-after on a lost log: %v", err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if stdout, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-before", "4", "--yes", "--backup", backup); err != nil || !strings.Contains(stdout, "before entry 4") {
		t.Fatalf("repair: %v, %q", err, stdout)
	}
	s, err := recovery.Open(ctx, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkRepaired(t, s, evs, 4)
}

// A damaged length prefix breaks the framing at entry 1, which a snapshot
// at 2 holds; entries 3..5 follow the break, and no snapshot holds them.
// --truncate-before 3 (what the startup error names) finds entry 3 by the
// index its frame carries and keeps 3..5 (counting frames dropped them:
// found by review). In a log of version 1 frames, which carry no index,
// they cannot be located: the repair refuses to drop them unasked, and
// --drop-unlocated drops them.
func TestWALRepairBeforeDamagedFraming(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("version1=%v", v1), func(t *testing.T) {
			data, opts, evs := repairDataDir(t, 5, 2)
			ctx := context.Background()
			seg := filepath.Join(data, "wal", fmt.Sprintf("%020d", 1))
			if v1 {
				toVersion1(t, seg)
			}
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			copy(b, []byte{0xff, 0xff, 0xff, 0x7f}) // entry 1's length, past the segment's end
			if err := os.WriteFile(seg, b, 0o640); err != nil {
				t.Fatal(err)
			}
			if _, err := recovery.Open(ctx, data, opts); !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), "--truncate-before 3 --yes") {
				t.Fatalf("open: %v, want ErrCorrupt naming --truncate-before 3", err)
			}
			_, _, err = runKvidx(t, "", "wal", "repair", data, "--truncate-before", "3", "--yes", "--backup", filepath.Join(t.TempDir(), "b1"))
			if !v1 {
				if err != nil {
					t.Fatalf("repair: %v", err)
				}
				s, err := recovery.Open(ctx, data, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				checkRepaired(t, s, evs, 6)
				return
			}
			if err == nil || !strings.Contains(err.Error(), "--drop-unlocated") {
				t.Fatalf("repair dropping unlocated entries unasked: %v, want a refusal naming --drop-unlocated", err)
			}
			if after, _ := os.ReadFile(seg); string(after) != string(b) {
				t.Fatal("the refused repair changed the segment")
			}
			_, stderr, err := runKvidx(t, "", "wal", "repair", data, "--truncate-before", "3", "--yes", "--drop-unlocated", "--backup", filepath.Join(t.TempDir(), "b2"))
			if err != nil || !strings.Contains(stderr, "could not be located") {
				t.Fatalf("repair with --drop-unlocated: %v, %q", err, stderr)
			}
		})
	}
}

// toVersion1 rewrites a WAL segment's entries as version 1 frames (version
// byte 1, CRC-32C of the snappy data, no index), as logs written before
// frames carried their index hold them.
func toVersion1(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for len(data) > 0 {
		size, n := binary.Uvarint(data)
		if n <= 0 || size > uint64(len(data)-n) {
			break
		}
		p := data[n : n+int(size)]
		data = data[n+int(size):]
		if len(p) < 6 || p[0] != 2 {
			break // the preallocated fill
		}
		_, k := binary.Uvarint(p[5:])
		z := p[5+k:]
		f := append([]byte{1, 0, 0, 0, 0}, z...)
		binary.LittleEndian.PutUint32(f[1:5], crc32.Checksum(z, crc32.MakeTable(crc32.Castagnoli)))
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	if err := os.WriteFile(path, out, 0o640); err != nil {
		t.Fatal(err)
	}
}

// repairDataDir makes a data directory of n WAL entries, entry i storing
// block i for worker 1, with a snapshot after each entry listed in
// snapAfter. It returns the directory, the options to open it with, and
// the events in order.
func repairDataDir(t *testing.T, n int, snapAfter ...int) (string, recovery.Options, []engine.Event) {
	t.Helper()
	data, ctx := t.TempDir(), context.Background()
	opts := recovery.Options{Sync: wal.SyncNone, Logger: slog.New(slog.DiscardHandler)}
	s, err := recovery.Open(ctx, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	var evs []engine.Event
	for i := 1; i <= n; i++ {
		ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: uint64(i), TokensHash: 7}}}
		evs = append(evs, ev)
		if _, _, err := s.Append(ctx, []engine.Event{ev}, nil); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(snapAfter, i) {
			if _, _, err := s.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return data, opts, evs
}

// keepFirstEntries cuts the single WAL segment of repairDataDir's data
// dir after its first n entries, as a lost tail would.
func keepFirstEntries(t *testing.T, data string, n int) {
	t.Helper()
	seg := filepath.Join(data, "wal", fmt.Sprintf("%020d", 1))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for range n {
		size, hn := binary.Uvarint(b[off:])
		off += hn + int(size)
	}
	if err := os.WriteFile(seg, b[:off], 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestWALBehindSnapshotRepair: the WAL lost its last entry, which the
// newest snapshot holds. A restart refuses and names --truncate-before,
// and after that repair it starts from the snapshot, appending after it.
func TestWALBehindSnapshotRepair(t *testing.T) {
	data, opts, evs := repairDataDir(t, 3, 3)
	ctx := context.Background()
	keepFirstEntries(t, data, 2)
	_, err := recovery.Open(ctx, data, opts)
	if !errors.Is(err, recovery.ErrUnrecoverable) || !strings.Contains(err.Error(), "--truncate-before 4 --yes") {
		t.Fatalf("open: %v, want a refusal naming --truncate-before 4", err)
	}
	if out, _, _ := runKvidx(t, "", "recover", "--data-dir", data, "--dry-run"); !strings.Contains(out, "--truncate-before 4 --yes") {
		t.Errorf("recover --dry-run does not name --truncate-before 4:\n%s", out)
	}
	if _, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-before", "4", "--yes", "--backup", filepath.Join(t.TempDir(), "b")); err != nil {
		t.Fatal(err)
	}
	s, err := recovery.Open(ctx, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Report(); r.SnapshotUsed.Index != 3 {
		t.Fatalf("after the repair: report %+v, want the snapshot at 3 used", r)
	}
	checkRepaired(t, s, evs, 4)
}

// TestDamagedSnapshotPastWALEnd: the newest snapshot is named past the
// WAL's end but is damaged (junk bytes, or another application's bbolt
// file). A restart and recover --dry-run refuse alike, saying that it is
// damaged and naming the cut that sets it aside and accepts the loss; that
// cut moves it aside, cuts nothing and succeeds, and the next start uses
// the older snapshot. Found by an audit: the refusal named only
// --truncate-before, which verifies the snapshot and refused, naming no
// way out, and the cut after the WAL's last entry failed with "nothing to
// cut" after it had moved the snapshot aside.
func TestDamagedSnapshotPastWALEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, path string)
	}{
		{"junk", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("not a snapshot\n"), 0o640); err != nil {
				t.Fatal(err)
			}
		}},
		{"foreign bbolt", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o640, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("users"))
				if err != nil {
					return err
				}
				return b.Put([]byte("alice"), []byte("1"))
			})
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, opts, evs := repairDataDir(t, 4, 2)
			ctx := context.Background()
			snap := filepath.Join(data, recovery.SnapshotDirName, snapshot.FileName(9))
			tc.write(t, snap)
			const cut = "--truncate-after 4 --yes"
			_, err := recovery.Open(ctx, data, opts)
			if !errors.Is(err, recovery.ErrUnrecoverable) || !strings.Contains(err.Error(), "is damaged") || !strings.Contains(err.Error(), cut) {
				t.Fatalf("open: %v\nwant a refusal saying the snapshot is damaged, naming %s", err, cut)
			}
			if out, _, _ := runKvidx(t, "", "recover", "--data-dir", data, "--dry-run"); !strings.Contains(out, "is damaged") || !strings.Contains(out, cut) {
				t.Errorf("recover --dry-run does not say the same:\n%s", out)
			}
			out, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "4", "--yes", "--backup", filepath.Join(t.TempDir(), "b"))
			if err != nil {
				t.Fatalf("the cut the refusal names: %v\n%s", err, out)
			}
			if _, err := os.Stat(snap + recovery.DamagedSuffix); err != nil {
				t.Errorf("the damaged snapshot was not set aside: %v", err)
			}
			s, err := recovery.Open(ctx, data, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if r := s.Report(); r.SnapshotUsed.Index != 2 || r.LastIndex != 4 {
				t.Fatalf("after the cut: report %+v, want the snapshot at 2 used and the log ending at 4", r)
			}
			checkRepaired(t, s, evs, 5)
		})
	}
}

// TestTruncateAfterPastLogEnd: a cut after an entry past the log's end
// with only damaged snapshots past it (set aside) succeeds and says where
// the log really ends; with a good snapshot between the log's end and the
// entry, it cut nothing and claimed success, and the next start still
// refused (found by review): it now fails, naming the repair the restart
// would.
func TestTruncateAfterPastLogEnd(t *testing.T) {
	t.Run("only damaged snapshots past", func(t *testing.T) {
		data, _, _ := repairDataDir(t, 4, 2)
		if err := os.WriteFile(filepath.Join(data, recovery.SnapshotDirName, snapshot.FileName(9)), []byte("junk\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		out, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "7", "--yes", "--backup", filepath.Join(t.TempDir(), "b"))
		if err != nil || !strings.Contains(out, "ends at entry 4,") {
			t.Fatalf("repair: %v\n%s\nwant success saying the log ends at entry 4", err, out)
		}
	})
	t.Run("a good snapshot past the log's end", func(t *testing.T) {
		data, opts, _ := repairDataDir(t, 3, 3)
		keepFirstEntries(t, data, 2)
		if err := os.WriteFile(filepath.Join(data, recovery.SnapshotDirName, snapshot.FileName(9)), []byte("junk\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		out, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "3", "--yes", "--backup", filepath.Join(t.TempDir(), "b"))
		if err == nil || !strings.Contains(err.Error(), "--truncate-before 4 --yes") {
			t.Fatalf("repair: %v\n%s\nwant a failure naming --truncate-before 4", err, out)
		}
		if _, err := recovery.Open(context.Background(), data, opts); !strings.Contains(fmt.Sprint(err), "--truncate-before 4 --yes") {
			t.Fatalf("open after: %v, want the refusal the repair named", err)
		}
	})
}

// A data directory of a newer format (a later kvidx's, whose log this one
// may misread as damage) is refused by every repair, as a restart refuses
// it, and left as it was: the repair cut it, a copy kept, where recovery
// would not even open it. wal stat and wal dump refuse it with the same
// message, printing nothing of a log they may misread (they read it as
// this kvidx's format).
func TestWALCommandsRefuseNewerFormat(t *testing.T) {
	data := t.TempDir()
	buildSegmentedDir(t, data, 2)
	if err := os.WriteFile(filepath.Join(data, recovery.FormatFileName), fmt.Appendf(nil, "kvidx-data %d\n", recovery.FormatVersion+1), 0o640); err != nil {
		t.Fatal(err)
	}
	before := hashTree(t, data)
	for _, args := range [][]string{
		{"repair", data, "--yes", "--truncate-after", "30"},
		{"repair", data, "--yes", "--truncate-before", "42"},
		{"repair", data, "--yes", "--trim-stray"},
		{"stat", data},
		{"stat", data, "--json"},
		{"dump", data},
		{"dump", data, "--from", "30", "--to", "40"},
	} {
		t.Run(strings.Join(slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == data }), " "), func(t *testing.T) {
			out, _, err := runKvidx(t, "", append([]string{"wal"}, args...)...)
			if err == nil || !strings.Contains(err.Error(), "is newer than this kvidx reads") || !errors.Is(err, recovery.ErrFormat) {
				t.Fatalf("error %v, want the newer format refused", err)
			}
			if !strings.HasPrefix(err.Error(), "wal "+args[0]+": data dir "+data+": format version") {
				t.Errorf("error %q, want the refusal of wal repair and of a restart, after %q", err, "wal "+args[0]+": ")
			}
			if out != "" && args[0] != "repair" {
				t.Errorf("printed %q of a log it may misread", out)
			}
			if after := hashTree(t, data); !maps.Equal(after, before) {
				t.Fatalf("the data directory changed: %v, was %v", after, before)
			}
		})
	}
}
