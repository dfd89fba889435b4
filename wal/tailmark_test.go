package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// segmentedLog writes entries 1..n to a new log in dir with small segments
// and closes it, returning its segments.
func segmentedLog(t *testing.T, dir string, n int) []segFile {
	t.Helper()
	o := quietOpts()
	o.SegmentSize = 256
	l := mustOpen(t, dir, o)
	appendN(t, l, 1, n)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 4 {
		t.Fatalf("segments %v: the test needs four", segs)
	}
	return segs
}

// A log whose newest segment files are gone opens as a shorter log unless
// something records its end: TAIL does, and Open, Inspect and Scan refuse
// it, naming the missing segment and the cut that accepts the loss.
func TestMissingTailRefused(t *testing.T) {
	for _, drop := range []int{1, 2} {
		t.Run(strings.Repeat("last ", drop), func(t *testing.T) {
			dir := t.TempDir()
			segs := segmentedLog(t, dir, 60)
			for _, s := range segs[len(segs)-drop:] {
				if err := os.Remove(filepath.Join(dir, s.name)); err != nil {
					t.Fatal(err)
				}
			}
			left := segs[len(segs)-drop-1]
			lastEntry := segs[len(segs)-drop].index - 1
			missing := segs[len(segs)-1].name

			_, err := Open(dir, quietOpts())
			var mt *MissingTailError
			if !errors.As(err, &mt) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want a MissingTailError", err)
			}
			if mt.LastEntry != lastEntry || mt.LastSegment != left.index || !strings.Contains(err.Error(), missing) {
				t.Fatalf("open: %+v (%v), want last entry %d, last segment %s, naming %s", mt, err, lastEntry, left.name, missing)
			}
			lay, ierr := Inspect(dir)
			if !errors.As(ierr, &mt) || len(lay.Gaps) != 1 || lay.LastIndex != lastEntry {
				t.Fatalf("inspect: %v, gaps %v, last %d: want the same refusal, listed as a gap", ierr, lay.Gaps, lay.LastIndex)
			}
			var n uint64
			if _, serr := Scan(dir, 0, 0, func(Entry) error { n++; return nil }); !errors.As(serr, &mt) || n != lastEntry {
				t.Fatalf("scan: %v after %d entries, want the refusal after %d", serr, n, lastEntry)
			}

			// The way out the refusal names: a cut after the last entry,
			// which has nothing to cut but accepts the loss.
			if err := RepairTruncateAfter(dir, mt.LastEntry, t.TempDir()); err != nil {
				t.Fatalf("repair: %v", err)
			}
			l := mustOpen(t, dir, nil)
			defer l.Close()
			if last, _ := l.LastIndex(); last != lastEntry {
				t.Fatalf("last index after the repair %d, want %d", last, lastEntry)
			}
			appendN(t, l, int(lastEntry)+1, int(lastEntry)+1)
		})
	}
}

// The ways a log legitimately ends sooner or starts later keep TAIL
// right: a cut after an entry of an earlier segment, a restart past the end,
// TruncateFront renaming the tail segment, and a tail segment that lost its
// entries (a power loss before their fsync, when none was acknowledged).
func TestTailMarkFollowsLegitimateChanges(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, dir string, segs []segFile)
	}{
		{"cut after an entry of the first segment", func(t *testing.T, dir string, segs []segFile) {
			if err := RepairTruncateAfter(dir, segs[1].index-2, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut after the last entry of a segment", func(t *testing.T, dir string, segs []segFile) {
			if err := RepairTruncateAfter(dir, segs[2].index-1, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}},
		{"restart past the end", func(t *testing.T, dir string, segs []segFile) {
			if _, err := RepairTruncateBefore(dir, 100, t.TempDir(), false); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncate front into the tail segment", func(t *testing.T, dir string, segs []segFile) {
			l := mustOpen(t, dir, nil)
			last, _ := l.LastIndex()
			if err := l.TruncateFront(last); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"tail segment emptied", func(t *testing.T, dir string, segs []segFile) {
			if err := os.Truncate(filepath.Join(dir, segs[len(segs)-1].name), 0); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			segs := segmentedLog(t, dir, 60)
			tt.change(t, dir, segs)
			if _, err := Inspect(dir); err != nil {
				t.Fatalf("inspect: %v", err)
			}
			l := mustOpen(t, dir, nil)
			last, _ := l.LastIndex()
			appendN(t, l, int(last)+1, int(last)+1)
			l.Close()
		})
	}
}

// A directory written before TAIL existed has none: nothing is checked
// until the first open records the tail segment.
func TestTailMarkAbsent(t *testing.T) {
	dir := t.TempDir()
	segs := segmentedLog(t, dir, 60)
	if err := os.Remove(filepath.Join(dir, TailMarkName)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, segs[len(segs)-1].name))
	l := mustOpen(t, dir, nil)
	l.Close()
	if mark, err := readTailMark(dir); err != nil || mark != segs[len(segs)-2].index {
		t.Fatalf("TAIL after open: %d, %v, want %d", mark, err, segs[len(segs)-2].index)
	}
}

// Every segment file gone: Open refuses without making a segment of its own
// (tidwall/wal makes segment 1 in an empty directory, which put back files
// would then follow with a gap), and the cut the refusal names works.
func TestAllSegmentsMissing(t *testing.T) {
	dir := t.TempDir()
	segmentedLog(t, dir, 60)
	l := mustOpen(t, dir, nil)
	if err := l.TruncateFront(20); err != nil {
		t.Fatal(err)
	}
	l.Close()
	segs, _ := listSegments(dir)
	away := t.TempDir()
	for _, s := range segs {
		os.Rename(filepath.Join(dir, s.name), filepath.Join(away, s.name))
	}
	_, err := Open(dir, quietOpts())
	var mt *MissingTailError
	if !errors.As(err, &mt) || mt.LastSegment != 0 || !strings.Contains(err.Error(), "--truncate-after 0") {
		t.Fatalf("open: %v", err)
	}
	if left, _ := listSegments(dir); len(left) != 0 {
		t.Fatalf("a refused open left segments %v", left)
	}
	// Put back, the log is whole again.
	for _, s := range segs {
		os.Rename(filepath.Join(away, s.name), filepath.Join(dir, s.name))
	}
	if lay, err := Inspect(dir); err != nil || lay.FirstIndex != 20 || len(lay.Gaps) != 0 {
		t.Fatalf("inspect after putting the segments back: first %d, gaps %v, %v", lay.FirstIndex, lay.Gaps, err)
	}
	// Gone for good: the cut the refusal names starts the log anew.
	for _, s := range segs {
		os.Remove(filepath.Join(dir, s.name))
	}
	if _, err := Inspect(dir); !errors.As(err, &mt) {
		t.Fatalf("inspect: %v", err)
	}
	if err := RepairTruncateAfter(dir, 0, t.TempDir()); err != nil {
		t.Fatalf("repair: %v", err)
	}
	l = mustOpen(t, dir, nil)
	appendN(t, l, 1, 1)
	l.Close()
}

// A scan whose range ends before the missing segments reads it whole, as
// with damage after its range (kvidx wal dump --to N).
func TestScanBeforeMissingTail(t *testing.T) {
	dir := t.TempDir()
	segs := segmentedLog(t, dir, 60)
	os.Remove(filepath.Join(dir, segs[len(segs)-1].name))
	var n int
	if _, err := Scan(dir, 1, 3, func(Entry) error { n++; return nil }); err != nil || n != 3 {
		t.Fatalf("scan 1..3: %d entries, %v", n, err)
	}
}

func TestShellArg(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/var/lib/kvidx", "/var/lib/kvidx"},
		{"./kvidx-data", "./kvidx-data"},
		{"/tmp/kvidx data", "'/tmp/kvidx data'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"", "''"},
		{"-data", "./-data"},
		{"-my data", "'./-my data'"},
	} {
		if got := ShellArg(tt.in); got != tt.want {
			t.Errorf("ShellArg(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// A restart past the end interrupted midway leaves the log as it was, which
// opens (found by review: TAIL written first named the segment to come, and
// the whole log was refused as missing it).
func TestRestartCrashLeavesLogThatOpens(t *testing.T) {
	const n = 30
	src, _ := buildLog(t, n, 300)
	if !crashRepairBefore(t, src, n+1, "written", 1) {
		t.Fatal("no crash")
	}
	l, err := Open(src, quietOpts())
	if err != nil {
		t.Fatalf("open after a crash in the repair: %v", err)
	}
	l.Close()
}

// A refused open changes nothing (found by review: the torn-tail repair of
// the segment left last ran first and cut it, so the missing files, put
// back, followed a gap).
func TestRefusedOpenChangesNothing(t *testing.T) {
	dir := t.TempDir()
	segs := segmentedLog(t, dir, 60)
	last, prev := segs[len(segs)-1].name, filepath.Join(dir, segs[len(segs)-2].name)
	away := t.TempDir()
	os.Rename(filepath.Join(dir, last), filepath.Join(away, last))
	orig, _ := os.ReadFile(prev)
	os.WriteFile(prev, orig[:len(orig)-3], 0o640)
	var mt *MissingTailError
	if _, err := Open(dir, quietOpts()); !errors.As(err, &mt) {
		t.Fatalf("open: %v", err)
	}
	if b, _ := os.ReadFile(prev); len(b) != len(orig)-3 {
		t.Fatalf("the refused open changed %s: %d bytes, was %d", prev, len(b), len(orig)-3)
	}
}

// The last entry a refusal names is the valid prefix's, in Open as in the
// read-only walk, when the segment left last ends torn (found by review:
// Open counted a torn frame into the fill as an entry).
func TestMissingTailTornLastEntry(t *testing.T) {
	dir := t.TempDir()
	segs := segmentedLog(t, dir, 60)
	os.Remove(filepath.Join(dir, segs[len(segs)-1].name))
	want := segs[len(segs)-1].index - 1
	torn := append(binary.AppendUvarint(nil, 100), bytes.Repeat([]byte{'x'}, 20)...)
	torn = append(torn, bytes.Repeat([]byte{fillByte}, 200)...)
	f, err := os.OpenFile(filepath.Join(dir, segs[len(segs)-2].name), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(torn)
	f.Close()
	var imt, omt *MissingTailError
	if _, err := Inspect(dir); !errors.As(err, &imt) {
		t.Fatal(err)
	}
	if _, err := Open(dir, quietOpts()); !errors.As(err, &omt) {
		t.Fatal(err)
	}
	if imt.LastEntry != want || omt.LastEntry != want {
		t.Fatalf("last entry: Inspect %d, Open %d, want %d", imt.LastEntry, omt.LastEntry, want)
	}
}

// A restart on a disk still full after a fence at a segment rollover (the
// new segment made, TAIL not rewritten) cannot record the newest segment:
// it is refused, but the refusal says that no acknowledged entry was cut and that space
// must be freed, not a bare "write TAIL: no space left on device", and,
// space back, every entry is there.
func TestReopenOnFullDiskAfterRolloverSaysToFreeSpace(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to stand for a full disk")
	}
	dir := t.TempDir()
	segs := segmentedLog(t, dir, 40)
	if err := writeTailMark(dir, segs[0].index); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, TailMarkName+".tmp")
	if err := os.Symlink("/dev/full", tmp); err != nil {
		t.Fatal(err)
	}
	o := quietOpts()
	o.SegmentSize = 256
	_, err := Open(dir, o)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "free some space") || !strings.Contains(err.Error(), "no acknowledged entry was cut") {
		t.Fatalf("open on a full disk: %v, want ENOSPC saying to free space and that no acknowledged entry was cut", err)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left behind: %v", tmp, err)
	}
	l := mustOpen(t, dir, o)
	defer l.Close()
	if got := readAll(t, l, 1); len(got) != 40 {
		t.Fatalf("%d entries after space is back, want 40", len(got))
	}
}

// A missing tail's refusal names a kept truncation file and the rename to
// try, but only one Open keeps (its segment gone): a temporary file whose
// segment is still there may be a partial copy, which Open deletes, and
// renamed it would finish a truncation with entries lost.
func TestMissingTailNamesOnlyKeptTemps(t *testing.T) {
	for _, tc := range []struct {
		name     string
		srcGone  bool
		wantKept bool
	}{
		{"segment gone", true, true},
		{"segment still there", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			segs := segmentedLog(t, dir, 60)
			// The newest segment is lost; a .START.TEMP copied from the
			// one before it (a partial copy: its first half).
			src := segs[len(segs)-2]
			data, err := os.ReadFile(filepath.Join(dir, src.name))
			if err != nil {
				t.Fatal(err)
			}
			temp := fmt.Sprintf("%020d.START.TEMP", src.index+1)
			if err := os.WriteFile(filepath.Join(dir, temp), data[:len(data)/2], 0o640); err != nil {
				t.Fatal(err)
			}
			gone := segs[len(segs)-1:]
			if tc.srcGone {
				gone = segs[len(segs)-2:]
			}
			for _, s := range gone {
				if err := os.Remove(filepath.Join(dir, s.name)); err != nil {
					t.Fatal(err)
				}
			}
			for _, check := range []struct {
				what string
				err  error
			}{{"CheckTail", CheckTail(dir)}, {"Open", openErr(dir)}} {
				var mt *MissingTailError
				if !errors.As(check.err, &mt) {
					t.Fatalf("%s: %v, want a MissingTailError", check.what, check.err)
				}
				named := strings.Contains(check.err.Error(), temp)
				if named != tc.wantKept || (len(mt.Kept) != 0) != tc.wantKept {
					t.Errorf("%s: Kept %v, names %s: %v, want it named: %v (%v)", check.what, mt.Kept, temp, named, tc.wantKept, check.err)
				}
			}
		})
	}
}

func openErr(dir string) error {
	l, err := Open(dir, quietOpts())
	if err == nil {
		l.Close()
	}
	return err
}
