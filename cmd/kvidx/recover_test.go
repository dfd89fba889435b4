package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/internal/rotest"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/snapshot"
)

func TestRecoverCompacts(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, fixtureDir, dir)
	out, stderr, err := runKvidx(t, "", "recover", "--data-dir", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"snapshot-00000000000000000050.bolt (WAL index 50)", "torn bytes cut         12",
		"replayed               10 entries", "snapshot written       snapshot-00000000000000000060.bolt", "wal now                51..60"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	snaps, _ := snapshot.List(filepath.Join(dir, "snapshots"))
	if len(snaps) != 2 || snaps[0].Index != 60 || snaps[1].Index != 50 {
		t.Fatalf("snapshots %+v", snaps)
	}
	// The dry run now loads the new snapshot and replays nothing.
	out, _, err = runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err != nil || !strings.Contains(out, "snapshot-00000000000000000060.bolt") || !strings.Contains(out, "entries to replay      none") {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestDryRunNoSnapshotAndRefusal(t *testing.T) {
	// No snapshot yet: a full replay from index 1.
	dir := t.TempDir()
	s := openStore(t, dir)
	appendAll(t, s, genHistory(5, 12), 1)
	want := s.Index().Stats()
	s.Close()
	out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err != nil || !strings.Contains(out, "none (full WAL replay from index 1)") || !strings.Contains(out, "1..12 (12)") {
		t.Fatalf("%v\n%s", err, out)
	}
	js, _, err := runKvidx(t, "", "inspect", "summary", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js, `"holder_blocks": `+itoa(want.HolderBlocks)) || !strings.Contains(js, `"entries": `+itoa(want.Entries)) {
		t.Fatalf("summary %s, want %+v", js, want)
	}
	// Empty lists are [], not null.
	js, _, err = runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run", "--json")
	if err != nil || !strings.Contains(js, `"snapshots_skipped": []`) || !strings.Contains(js, `"temp_files_to_remove": []`) {
		t.Fatalf("%v\n%s", err, js)
	}
	// The snapshots survive but the WAL is lost: a restart refuses.
	dir2 := t.TempDir()
	copyTree(t, fixtureDir, dir2)
	os.RemoveAll(filepath.Join(dir2, "wal"))
	out, _, err = runKvidx(t, "", "recover", "--data-dir", dir2, "--dry-run")
	var ee *exitError
	if err == nil || !asExit(err, &ee) || ee.code != 1 || !strings.Contains(out, "REFUSE") {
		t.Fatalf("%v\n%s", err, out)
	}
	// A damaged newest snapshot is skipped with its reason; the older one is used.
	dir3 := t.TempDir()
	copyTree(t, fixtureDir, dir3)
	bad := filepath.Join(dir3, "snapshots", "snapshot-00000000000000000050.bolt")
	b, _ := os.ReadFile(bad)
	os.WriteFile(bad, b[:len(b)-4096], 0o644)
	out, _, err = runKvidx(t, "", "recover", "--data-dir", dir3, "--dry-run")
	if err != nil || !strings.Contains(out, "snapshot skipped       snapshot-00000000000000000050.bolt") ||
		!strings.Contains(out, "snapshot to load       snapshot-00000000000000000030.bolt") {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestInspectMatch(t *testing.T) {
	ix, _, err := snapshot.Load(context.Background(), fixSnapB)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range [][]uint64{{105}, {107, 107}, {101, 106, 110}} {
		want := string(eventjson.AppendResult(nil, ix.Match(q, nil), len(q))) + "\n"
		out, _, err := runKvidx(t, "", "inspect", "match", fixSnapB, "--local-hashes", joinUints(q))
		if err != nil || out != want {
			t.Fatalf("%v: %q (%v), want %q", q, out, err, want)
		}
	}
	out, _, err := runKvidx(t, "", "inspect", "match", fixSnapB, "--tokens", "1,2,3,4,5", "--block-size", "2", "--lora-name", "x")
	if err != nil || !strings.HasSuffix(out, `"query_blocks":2}`+"\n") {
		t.Fatalf("%v %q", err, out)
	}
	// A block size larger than any buffer is a query of no block.
	out, _, err = runKvidx(t, "", "inspect", "match", fixSnapB, "--tokens", "1,2,3,4", "--block-size", "99999999999999")
	if err != nil || out != `{"scores":[],"query_blocks":0}`+"\n" {
		t.Fatalf("huge --block-size: %v %q", err, out)
	}
	if _, _, err := runKvidx(t, "", "inspect", "match", fixSnapB, "--tokens", "1,2"); err == nil {
		t.Fatal("--tokens without --block-size accepted")
	}
	if _, _, err := runKvidx(t, "", "inspect", "summary", "/nonexistent/x.bolt"); err == nil || !strings.Contains(err.Error(), "/nonexistent/x.bolt") {
		t.Fatalf("error does not name the file: %v", err)
	}
}

func itoa(n int) string { return joinUints([]uint64{uint64(n)}) }

// recover --dry-run and inspect summary must refuse a data directory exactly
// when recovery.Open does because of its FORMAT file: a missing FORMAT next
// to a WAL was reported as a new directory, and a FORMAT line without its
// newline was accepted.
func TestDryRunFormatAgreesWithOpen(t *testing.T) {
	tests := []struct {
		name       string
		fixture    bool   // start from the fixture (a WAL and snapshots), else an empty directory
		format     string // FORMAT's contents; "-" removes it
		wantRefuse bool
	}{
		{"valid", true, "kvidx-data 1\n", false},
		{"missing next to a WAL", true, "-", true},
		{"no trailing newline", true, "kvidx-data 2", true},
		{"newer version", true, "kvidx-data 3\n", true},
		{"format 1", true, "kvidx-data 1\n", false},
		{"bad version", true, "kvidx-data x\n", true},
		{"other magic", true, "kvidx 1\n", true},
		{"missing in an empty directory", false, "-", false},
		{"valid in an empty directory", false, "kvidx-data 1\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.fixture {
				copyTree(t, fixtureDir, dir)
			}
			path := filepath.Join(dir, "FORMAT")
			if tt.format == "-" {
				os.Remove(path)
			} else if err := os.WriteFile(path, []byte(tt.format), 0o644); err != nil {
				t.Fatal(err)
			}
			// What a restart does, on a copy (Open changes the directory).
			img := t.TempDir()
			copyTree(t, dir, img)
			s, oerr := recovery.Open(context.Background(), img, recovery.Options{Logger: quietLogger()})
			if oerr == nil {
				s.Close()
			}
			if (oerr != nil) != tt.wantRefuse || (oerr != nil && !errors.Is(oerr, recovery.ErrFormat)) {
				t.Fatalf("recovery.Open = %v, want refusal %v", oerr, tt.wantRefuse)
			}
			out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
			var ee *exitError
			if tt.wantRefuse {
				if err == nil || !asExit(err, &ee) || ee.code != 1 || !strings.Contains(out, "REFUSE") {
					t.Errorf("dry run: %v\n%s", err, out)
				}
			} else if err != nil || !strings.Contains(out, "a restart would recover") {
				t.Errorf("dry run: %v\n%s", err, out)
			}
			if _, _, err := runKvidx(t, "", "inspect", "summary", dir); (err != nil) != tt.wantRefuse {
				t.Errorf("inspect summary: %v, want refusal %v", err, tt.wantRefuse)
			}
		})
	}
}

// An offline recover, and a WAL repair, of a path that is not a data
// directory fail and create nothing (recover made a new data directory
// wherever it was pointed; repair left DIR/wal/LOCK behind).
func TestRecoverNeedsDataDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	unrelated := filepath.Join(base, "unrelated")
	os.Mkdir(unrelated, 0o755)
	os.WriteFile(filepath.Join(unrelated, "notes.txt"), []byte("x"), 0o644)
	tests := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(base, "nonexistent"), "does not exist"},
		{"plain file", file, "is not a directory"},
		{"empty directory", t.TempDir(), "not a kvidx data directory"},
		{"unrelated directory", unrelated, "not a kvidx data directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hashTree(t, base)
			for _, args := range [][]string{
				{"recover", "--data-dir", tt.path},
				{"wal", "repair", tt.path, "--truncate-after", "0", "--yes", "--backup", filepath.Join(t.TempDir(), "bak")},
			} {
				_, _, err := runKvidx(t, "", args...)
				if err == nil || !strings.Contains(err.Error(), tt.path) {
					t.Errorf("%v: %v", args, err)
				} else if args[0] == "recover" && !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%v: %v, want %q", args, err, tt.want)
				}
			}
			after := hashTree(t, base)
			if len(after) != len(before) {
				t.Errorf("files before %v, after %v", before, after)
			}
			for _, p := range []string{"FORMAT", "wal", "snapshots"} {
				if _, err := os.Stat(filepath.Join(tt.path, p)); err == nil {
					t.Errorf("%s created", p)
				}
			}
		})
	}
}

// --keep below 1 is refused (it silently became 2).
func TestRecoverKeepAtLeastOne(t *testing.T) {
	for _, keep := range []string{"0", "-1"} {
		dir := t.TempDir()
		copyTree(t, fixtureDir, dir)
		before := hashTree(t, dir)
		_, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--keep", keep)
		if err == nil || !strings.Contains(err.Error(), "--keep "+keep) {
			t.Errorf("--keep %s: %v", keep, err)
		}
		if after := hashTree(t, dir); len(after) != len(before) {
			t.Errorf("--keep %s changed the directory", keep)
		}
	}
}

// --json without --dry-run is refused before anything changes (it printed
// the table and compacted the directory).
func TestRecoverJSONNeedsDryRun(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr bool
	}{
		{[]string{"--json"}, true},
		{[]string{"--json", "--keep", "1"}, true},
		{[]string{"--json", "--dry-run"}, false},
	} {
		dir := t.TempDir()
		copyTree(t, fixtureDir, dir)
		before := hashTree(t, dir)
		out, _, err := runKvidx(t, "", append([]string{"recover", "--data-dir", dir}, tc.args...)...)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "--json is for the --dry-run report") {
				t.Errorf("%v: err %v", tc.args, err)
			}
		} else if err != nil || !strings.HasPrefix(out, "{") {
			t.Errorf("%v: %v\n%s", tc.args, err, out)
		}
		after := hashTree(t, dir)
		if len(after) != len(before) {
			t.Errorf("%v changed the directory", tc.args)
		}
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%v changed %s", tc.args, k)
			}
		}
	}
}

// An empty element of --local-hashes or --tokens is an error naming it (it
// was dropped, so "101,,103" asked about the chain 101,103); spaces around
// elements are still fine.
func TestInspectMatchListElements(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--local-hashes", "105,,106"}, `--local-hashes: element 2, "", is not`},
		{[]string{"--local-hashes", "105,"}, `--local-hashes: element 2, "", is not`},
		{[]string{"--local-hashes", ","}, `--local-hashes: element 1, "", is not`},
		{[]string{"--local-hashes", "105,x"}, `--local-hashes: element 2, "x", is not`},
		{[]string{"--tokens", "1,,2", "--block-size", "1"}, `--tokens: element 2, "", is not a token id`},
		{[]string{"--tokens", ",", "--block-size", "1"}, `--tokens: element 1, "", is not a token id`},
		{[]string{"--local-hashes", "105", "--lora-name", "x"}, `--lora-name applies to --tokens, not to --local-hashes`},
		{[]string{"--local-hashes", "105", "--block-size", "2"}, `--block-size applies to --tokens, not to --local-hashes`},
		{[]string{"--local-hashes", " 105 , 106"}, ""},
		{[]string{"--tokens", "1, 2", "--block-size", "1"}, ""},
	} {
		out, _, err := runKvidx(t, "", append([]string{"inspect", "match", fixSnapB}, tc.args...)...)
		if tc.wantErr == "" {
			if err != nil || !strings.Contains(out, `"query_blocks":2`) {
				t.Errorf("%q: %v %q", tc.args, err, out)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || out != "" {
			t.Errorf("%q: err %v, out %q; want an error with %q", tc.args, err, out, tc.wantErr)
		}
	}
}

// An error found reading a data directory names it once.
func TestDataDirNamedOnce(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "wal"), []byte("x"), 0o644)
	for _, args := range [][]string{{"recover", "--data-dir", dir, "--dry-run"}, {"inspect", "summary", dir}} {
		_, _, err := runKvidx(t, "", args...)
		if err == nil || strings.Count(err.Error(), "data dir "+dir) != 1 {
			t.Errorf("%v: %v, want an error naming the data dir once", args, err)
		}
	}
}

// A dry run that finds damage the replay would stop at names the repair a
// restart's refusal names (found by an operator drill: it named none).
func TestRecoverDryRunNamesReplayRepair(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, fixtureDir, dir)
	seg := filepath.Join(dir, "wal", "00000000000000000031") // entries 31..59
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0x40 // entry 59, after the newest snapshot (50)
	if err := os.WriteFile(seg, b, 0o640); err != nil {
		t.Fatal(err)
	}
	out, _, _ := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	// The command as it can be pasted (a README drill pasted one that
	// named DATA_DIR), and the kind of damage said once.
	want := "kvidx wal repair " + dir + " --truncate-after 58 --yes"
	if !strings.Contains(out, "replay would fail") || !strings.Contains(out, want) || strings.Contains(out, "wal corrupt: wal corrupt") {
		t.Fatalf("dry run:\n%s\nwant the replay's repair, %q", out, want)
	}
	// The text says what the JSON report says: the snapshot a restart
	// would load and the entries it would stop in.
	if !strings.Contains(out, "snapshot-00000000000000000050.bolt") || !strings.Contains(out, "entries to replay") {
		t.Fatalf("dry run:\n%s\nwant the snapshot to load and the entries to replay before the refusal", out)
	}
}

// The repair a refusal names pastes into a shell as it is, whatever the
// data directory's path (found by review: a space split it in two).
func TestRepairCommandQuotesThePath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kvidx data's")
	copyTree(t, fixtureDir, dir)
	seg := filepath.Join(dir, "wal", "00000000000000000031")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0x40
	os.WriteFile(seg, b, 0o640)
	out, _, _ := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	i := strings.Index(out, "kvidx wal repair ")
	j := strings.Index(out[max(i, 0):], " --yes")
	if i < 0 || j < 0 {
		t.Fatalf("no repair command in\n%s", out)
	}
	argv, err := exec.Command("sh", "-c", "printf '%s\\n' "+out[i:i+j+len(" --yes")]).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSpace(string(argv)), "\n"); len(got) != 7 || got[3] != dir {
		t.Fatalf("the shell reads the command as %q, want %q as its fourth word", got, dir)
	}
}

// With no snapshot, a gap in the WAL names the cut that lets a restart
// replay what comes before it (found by an audit: it named none).
func TestNoSnapshotGapNamesRepair(t *testing.T) {
	dir, segs := segmentedDataDir(t)
	os.Remove(filepath.Join(dir, "wal", segs[1]))
	out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	i := strings.Index(out, "kvidx wal repair ")
	if err == nil || i < 0 {
		t.Fatalf("dry run: %v\n%s\nwant a refusal naming a repair", err, out)
	}
	// The repair it names, run as printed, and the restart then recovers.
	j := strings.Index(out[i:], " --yes")
	args := strings.Fields(out[i+len("kvidx ") : i+j+len(" --yes")])
	if _, _, err := runKvidx(t, "", args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run"); err != nil {
		t.Fatalf("dry run after the repair: %v\n%s", err, out)
	}
}

// A segment whose framing breaks after whole entries is cut at the break,
// not at its start: those entries read again once what follows them is
// gone (found by review: the advice dropped the whole segment, and for
// the first segment named no cut at all).
func TestFramingBreakCutKeepsWholeEntries(t *testing.T) {
	for _, tt := range []struct {
		name       string
		seg, entry int // the segment (in order) and the entry in it whose length prefix breaks
	}{
		{"middle segment", 2, 13},
		{"first segment", 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, segs := segmentedDataDir(t)
			path := filepath.Join(dir, "wal", segs[tt.seg])
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			off := 0
			for range tt.entry {
				size, n := binary.Uvarint(b[off:])
				off += n + int(size)
			}
			copy(b[off:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
			os.WriteFile(path, b, 0o640)
			first, _ := strconv.ParseUint(segs[tt.seg], 10, 64)
			keep := first + uint64(tt.entry) - 1

			out, _, _ := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
			want := fmt.Sprintf("kvidx wal repair %s --truncate-after %d --yes", dir, keep)
			if !strings.Contains(out, want) {
				t.Fatalf("dry run:\n%s\nwant %q", out, want)
			}
			if _, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-after", strconv.FormatUint(keep, 10), "--yes"); err != nil {
				t.Fatal(err)
			}
			out, _, err = runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
			if err != nil || !strings.Contains(out, fmt.Sprintf("1..%d", keep)) {
				t.Fatalf("dry run after the cut: %v\n%s\nwant entries 1..%d replayed", err, out, keep)
			}
		})
	}
}

// A damaged entry before the break is not kept by the cut at the break
// (found by review: the cut kept it, and the next start refused it).
func TestFramingBreakCutStopsBeforeBadEntry(t *testing.T) {
	dir, segs := segmentedDataDir(t)
	path := filepath.Join(dir, "wal", segs[2])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int // entry i of the segment ends at ends[i]
	for off := 0; off < len(b); {
		size, n := binary.Uvarint(b[off:])
		off += n + int(size)
		ends = append(ends, off)
	}
	b[ends[1]+12] ^= 0x40                                                      // entry 2's payload: a bad checksum
	copy(b[ends[12]:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // entry 13's length prefix
	os.WriteFile(path, b, 0o640)
	first, _ := strconv.ParseUint(segs[2], 10, 64)
	keep := first + 1 // entries 0 and 1 of the segment

	out, _, _ := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if want := fmt.Sprintf("--truncate-after %d --yes", keep); !strings.Contains(out, want) {
		t.Fatalf("dry run:\n%s\nwant %q", out, want)
	}
	if _, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-after", strconv.FormatUint(keep, 10), "--yes"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run"); err != nil {
		t.Fatalf("dry run after the cut: %v\n%s", err, out)
	}
}

// A data directory this user cannot write (a read-only mount) makes a
// restart fail at once, at the WAL's lock file, as the offline recover
// shows: recover --dry-run, which predicted a clean restart, says so and
// exits 1; inspect, read-only, still summarizes the data and says it too.
func TestDryRunNotWritableTable(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, fixtureDir, dir)
	rotest.ReadOnly(t, dir)
	walDir := filepath.Join(dir, recovery.WALDirName)
	tests := []struct {
		name     string
		args     []string
		exit1    bool   // exit status 1, else success
		want     string // in stdout, or in the error with exit1
		wantLine string // a line of stdout ("": none checked)
	}{
		{"recover", []string{"recover", "--data-dir", dir}, true, "open lock file", ""},
		{"dry run", []string{"recover", "--data-dir", dir, "--dry-run"}, true, "by this user would fail: " + walDir + " is not writable",
			"outcome                FAIL to start (as this user): a path it writes is not writable (above)"},
		{"dry run json", []string{"recover", "--data-dir", dir, "--dry-run", "--json"}, true, walDir + " is not writable", `  "write_problem": "` + walDir + ` is not writable`},
		{"inspect", []string{"inspect", "summary", dir}, false, "restart would FAIL       " + walDir + " is not writable", "holder blocks            29"},
		{"inspect json", []string{"inspect", "summary", dir, "--json"}, false, `"write_problem": "` + walDir + ` is not writable`, `  "holder_blocks": 29,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, err := runKvidx(t, "", tt.args...)
			var ee *exitError
			switch {
			case tt.exit1 && tt.name != "recover" && (err == nil || !asExit(err, &ee) || ee.code != 1):
				t.Fatalf("error %v, want exit status 1\n%s", err, out)
			case tt.exit1 && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one with %q\n%s", err, tt.want, out)
			case !tt.exit1 && (err != nil || !strings.Contains(out, tt.want)):
				t.Fatalf("error %v, stdout %s; want %q in it\nstderr: %s", err, out, tt.want, stderr)
			}
			if tt.wantLine != "" && !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.HasPrefix(l, tt.wantLine) }) {
				t.Errorf("stdout %s; want a line starting %q", out, tt.wantLine)
			}
		})
	}
}
