package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

// walSegments returns the names of the segment files of dir/wal, in order.
func walSegments(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if len(e.Name()) == 20 {
			names = append(names, e.Name())
		}
	}
	return names
}

// Trailing bytes after the whole entries of a segment before the last one
// make that segment unreadable, not the first entry of the next one: a
// restart that replays from the next segment recovers, and the read-only
// tools must say so (they reported damage at the next segment's first
// entry and a refusal).
func TestFramingBreakBeforeSnapshotAgrees(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	h := genHistory(9, 200)
	var snapAt uint64
	for i := range h {
		appendAll(t, s, h[i:i+1], uint64(i+1))
		if snapAt == 0 && len(walSegments(t, dir)) == 2 {
			// The first segment just rolled over: snapshot its last entry,
			// so a restart replays from the second segment only.
			snapAt = uint64(i + 1)
			if _, idx, err := s.Snapshot(context.Background()); err != nil || idx != snapAt {
				t.Fatalf("snapshot: %d %v", idx, err)
			}
		}
		if snapAt != 0 && uint64(i+1) == snapAt+10 {
			break
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs := walSegments(t, dir)
	if len(segs) < 2 || segs[1] != segmentName(snapAt+1) {
		t.Fatalf("segments %v, snapshot at %d", segs, snapAt)
	}
	f, err := os.OpenFile(filepath.Join(dir, "wal", segs[0]), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("garbage"))
	f.Close()

	next := itoa(int(snapAt + 1))
	if out, _, err := runKvidx(t, "", "wal", "dump", dir, "--from", next, "--to", next); err != nil || out == "" {
		t.Errorf("wal dump of entry %s: %v %q", next, err, out)
	}
	if _, _, err := runKvidx(t, "", "wal", "dump", dir, "--from", "2", "--to", "2"); err == nil || !strings.Contains(err.Error(), segs[0]) {
		t.Errorf("wal dump of entry 2 in the broken segment: %v", err)
	}
	out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err != nil || !strings.Contains(out, "a restart would recover") {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	if out, _, err := runKvidx(t, "", "inspect", "summary", dir); err != nil {
		t.Errorf("summary: %v\n%s", err, out)
	}
	// And a restart does recover.
	rs, err := recovery.Open(context.Background(), dir, recovery.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("recovery.Open: %v", err)
	}
	rs.Close()
}

func segmentName(i uint64) string {
	s := itoa(int(i))
	return strings.Repeat("0", 20-len(s)) + s
}

// wal stat and wal dump on a path that is not a data directory are errors
// naming the path and what is missing (they reported an empty log, or a
// plain file as one entry).
func TestWALReadNotADataDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("not a data directory\n"), 0o644)
	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o755)
	data := filepath.Join(base, "data")
	copyTree(t, fixtureDir, data)
	walFile := filepath.Join(base, "walfile")
	os.Mkdir(walFile, 0o755)
	os.WriteFile(filepath.Join(walFile, "wal"), nil, 0o644)
	tests := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(base, "nonexistent"), "does not exist"},
		{"plain file", file, "is not a directory"},
		{"no wal directory", empty, "has no wal/ directory"},
		{"the wal directory itself", filepath.Join(data, "wal"), "has no wal/ directory"},
		{"wal is a file", walFile, "is not a directory"},
	}
	for _, tt := range tests {
		for _, cmd := range []string{"stat", "dump"} {
			t.Run(tt.name+"/"+cmd, func(t *testing.T) {
				out, _, err := runKvidx(t, "", "wal", cmd, tt.path)
				if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %v, want one naming %s with %q (output %q)", err, tt.path, tt.want, out)
				}
			})
		}
	}
}

// wal stat counts the entries the log could read, and lists every segment
// file even when opening the log would refuse it. Damage exits 1 wherever it
// is: in an earlier segment the log opens, but a replay through it stops.
func TestWALStatDamagedCounts(t *testing.T) {
	src, segs := segmentedDataDir(t)
	tests := []struct {
		name        string
		seg         string // the segment whose first entry is damaged
		wantEntries int
		wantRefuse  bool
	}{
		{"damage in the first segment", segs[0], 119, true},
		{"damage in the last segment, valid entries after it", segs[len(segs)-1], -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, src, dir)
			path := filepath.Join(dir, "wal", tt.seg)
			b, _ := os.ReadFile(path)
			size, n := binary.Uvarint(b)
			end := n + int(size) // the end of the first entry
			if n <= 0 || end >= len(b) {
				t.Fatalf("segment %s: test needs two entries in it", tt.seg)
			}
			b[end-1] ^= 0xff // the first entry's last byte
			os.WriteFile(path, b, 0o644)
			out, _, err := runKvidx(t, "", "wal", "stat", dir, "--json")
			if (err != nil) != tt.wantRefuse {
				t.Fatalf("wal stat: %v", err)
			}
			var st walStat
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatal(err)
			}
			want := uint64(tt.wantEntries)
			if tt.wantEntries < 0 {
				want = st.LastIndex // the earlier segments' entries, all whole
			}
			if st.Entries != want {
				t.Errorf("entries %d, want %d (range %d..%d)", st.Entries, want, st.FirstIndex, st.LastIndex)
			}
			var bytes int64
			for _, s := range st.Segments {
				bytes += s.Bytes
			}
			if len(st.Segments) != len(segs) || bytes != st.Bytes {
				t.Errorf("%d segments of %d bytes listed, %d files of %d bytes", len(st.Segments), bytes, len(segs), st.Bytes)
			}
		})
	}
}

// A dump whose range the log does not hold says so on stderr (it printed
// nothing, or less than asked, without a word), and still exits 0.
func TestWALDumpRangeNote(t *testing.T) {
	for _, tc := range []struct {
		from, to, first, last uint64
		want                  string
	}{
		{0, 0, 51, 60, ""},
		{55, 57, 51, 60, ""},
		{51, 60, 51, 60, ""},
		{0, 10, 51, 60, "holds entries 51..60; earlier ones were truncated"},
		{0, 50, 51, 60, "holds entries 51..60; earlier ones were truncated"},
		{61, 0, 51, 60, "holds entries 51..60; nothing at or after 61 yet"},
		{0, 5, 61, 60, "holds no entries (the next is 61); earlier ones were truncated"},
		{61, 0, 61, 60, "nothing at or after 61 yet"},
		{0, 0, 1, 0, ""},
		{5, 0, 51, 60, "holds entries 51..60; entries 5..50 were truncated after a snapshot (kvidx inspect reads snapshots): dumping from 51"},
		{5, 55, 51, 60, "entries 5..50 were truncated"},
		{5, 10, 51, 60, "earlier ones were truncated"},
	} {
		got := dumpRangeNote(tc.from, tc.to, tc.first, tc.last)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("from %d to %d, log %d..%d: note %q, want %q", tc.from, tc.to, tc.first, tc.last, got, tc.want)
		}
	}
	out, stderr, err := runKvidx(t, "", "wal", "dump", fixtureDir, "--to", "3")
	if err != nil || out != "" || !strings.Contains(stderr, "earlier ones were truncated") {
		t.Fatalf("dump before the log: %v %q %q", err, out, stderr)
	}
	whole, stderr, err := runKvidx(t, "", "wal", "dump", fixtureDir)
	if err != nil || stderr != "" {
		t.Fatalf("whole dump: %v, stderr %q", err, stderr)
	}
	// A --from before the log starts at its first entry, saying so (it
	// failed as if the log were damaged: "wal truncated").
	out, stderr, err = runKvidx(t, "", "wal", "dump", fixtureDir, "--from", "1")
	if err != nil || out != whole || !strings.Contains(stderr, "were truncated after a snapshot") {
		t.Fatalf("dump from 1: %v, same output %v, stderr %q", err, out == whole, stderr)
	}
	if _, _, err := runKvidx(t, "", "wal", "dump", fixtureDir, "--to", "0"); err == nil || !strings.Contains(err.Error(), "--to 0") {
		t.Fatalf("dump --to 0: %v, want a refusal (it dumped the whole log)", err)
	}
}

// A dump that meets damage names the repair, as a restart does, and says
// what is wrong once (found by review: "wal corrupt: wal corrupt").
func TestWALDumpDamageNamesRepair(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, fixtureDir, dir)
	seg := filepath.Join(dir, "wal", "00000000000000000031")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[40] ^= 0x40
	os.WriteFile(seg, b, 0o640)
	_, _, err = runKvidx(t, "", "wal", "dump", dir)
	if err == nil || strings.Contains(err.Error(), "wal corrupt: wal corrupt") || !strings.Contains(err.Error(), "kvidx wal repair "+dir) {
		t.Fatalf("wal dump: %v", err)
	}
}

// A dump that stops before a missing tail says the log is not whole after
// its range (found by an audit: it noted damaged entries there, not gaps).
func TestWALDumpNotesGapAfterRange(t *testing.T) {
	dir, segs := segmentedDataDir(t)
	os.Remove(filepath.Join(dir, "wal", segs[len(segs)-1]))
	_, stderr, err := runKvidx(t, "", "wal", "dump", dir, "--to", "2")
	if err != nil || strings.Count(stderr, "not whole after --to 2") != 1 {
		t.Fatalf("wal dump --to 2: %v, stderr %q", err, stderr)
	}
}

// segmentedDataDir is a new data directory holding a WAL of several
// segments (entries of genHistory(5, 120), no snapshot), and its segment
// file names in order.
func segmentedDataDir(t *testing.T) (dir string, segs []string) {
	t.Helper()
	dir = t.TempDir()
	s := openStore(t, dir)
	appendAll(t, s, genHistory(5, 120), 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs = walSegments(t, dir)
	if len(segs) < 3 {
		t.Fatalf("segments %v: the tests need three", segs)
	}
	return dir, segs
}

// The cut a missing tail's refusal names, run as printed, says that it
// accepted the loss (it cut nothing itself), and the log then opens.
func TestWALRepairAcceptsMissingTail(t *testing.T) {
	dir, segs := segmentedDataDir(t)
	last := segs[len(segs)-1]
	os.Remove(filepath.Join(dir, "wal", last))
	first, _ := strconv.ParseUint(last, 10, 64)
	keep := strconv.FormatUint(first-1, 10)
	out, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-after", keep, "--yes")
	if err != nil || !strings.Contains(out, "is accepted") {
		t.Fatalf("wal repair: %v, %q", err, out)
	}
	if out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run"); err != nil {
		t.Fatalf("dry run after the repair: %v\n%s", err, out)
	}
}

// A stray byte after the entries of a middle segment, with no snapshot to
// start past it: recovery's refusal and the dry run's name --trim-stray,
// which keeps every entry (the cut they named before dropped every entry
// after the segment), and the log then replays whole.
func TestWALRepairTrimsStrayBytes(t *testing.T) {
	dir, segs := segmentedDataDir(t)
	f, err := os.OpenFile(filepath.Join(dir, "wal", segs[1]), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{'x'})
	f.Close()
	want := "kvidx wal repair " + dir + " --trim-stray --yes"
	if _, err := recovery.Open(context.Background(), dir, recovery.Options{Logger: quietLogger()}); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("open: %v; want a refusal naming %q", err, want)
	}
	out, stderr, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err == nil || !strings.Contains(out+stderr, want) || strings.Contains(out+stderr, "--truncate-after") {
		t.Fatalf("dry run: %v; want a refusal naming %q and no cut\n%s%s", err, want, out, stderr)
	}
	out, _, err = runKvidx(t, "", "wal", "repair", dir, "--trim-stray", "--yes")
	if err != nil || !strings.Contains(out, "trimmed 1 stray byte(s) off segment "+segs[1]) {
		t.Fatalf("wal repair --trim-stray: %v, %q", err, out)
	}
	out, _, err = runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err != nil || !strings.Contains(out, "1..120 (120)") {
		t.Fatalf("dry run after the repair: %v; want all 120 entries replayed\n%s", err, out)
	}
}

// A log that cannot be read (an I/O error, not damage) fails stat and dump
// with the error alone: the layout walked up to the failure is partial, and
// they printed it as the log's ("range 0..0", "open would refuse: ...
// permission denied") or noted from it that the log held no entries.
func TestWALReadIOErrorPrintsNoPartialLayout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		breakLog func(t *testing.T, walDir string)
		wantErr  string
	}{
		{"TAIL unreadable", func(t *testing.T, walDir string) {
			if err := os.Mkdir(filepath.Join(walDir, wal.TailMarkName), 0o750); err != nil {
				t.Fatal(err)
			}
		}, "is a directory"},
		{"segment unreadable", func(t *testing.T, walDir string) {
			// A link to itself: opening it fails (ELOOP) for root too,
			// and it is not a missing file.
			seg := filepath.Join(walDir, "00000000000000000060")
			if err := os.Remove(seg); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Base(seg), seg); err != nil {
				t.Fatal(err)
			}
		}, "too many levels of symbolic links"},
	} {
		for _, args := range [][]string{{"stat"}, {"stat", "--json"}, {"dump", "--from", "55"}} {
			t.Run(tc.name+"/"+strings.Join(args, " "), func(t *testing.T) {
				dir := t.TempDir()
				copyTree(t, fixtureDir, dir)
				tc.breakLog(t, filepath.Join(dir, "wal"))
				out, stderr, err := runKvidx(t, "", append([]string{"wal", args[0], dir}, args[1:]...)...)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				if out != "" || stderr != "" {
					t.Fatalf("printed a partial layout: stdout %q, stderr %q", out, stderr)
				}
			})
		}
	}
}
