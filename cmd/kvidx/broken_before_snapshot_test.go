package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A middle segment whose framing breaks at an entry the newest snapshot
// holds, the entries after the snapshot in the same segment: the refusal
// names the cut before the entry after the snapshot, which keeps every
// later entry (found by an audit: it named --truncate-after at the damage,
// which drops every entry after the snapshot and which the repair refuses,
// the snapshot being newer than the cut).
func TestBrokenFramingBeforeSnapshotNamesTruncateBefore(t *testing.T) {
	dir := t.TempDir()
	makeHistory(t, dir, 60)
	segs, si := segmentOf60And61(t, dir)
	path := filepath.Join(dir, "wal", segs[si])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // entry first's length prefix
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("kvidx wal repair %s --truncate-before 61 --yes", dir)
	out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("dry run: %v\n%s\nwant a refusal naming %q", err, out, want)
	}
	if _, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-before", "61", "--yes"); err != nil {
		t.Fatalf("the repair named: %v", err)
	}
	out, _, err = runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err != nil || !strings.Contains(out, "61..120 (60)") {
		t.Fatalf("dry run after the repair: %v\n%s\nwant entries 61..120 replayed", err, out)
	}
}

// A middle segment gone with the entries on both sides of the newest
// snapshot's index: that snapshot cannot be continued, and the cut after
// the entries before the segment would end the log before it. The refusal
// says to move it aside first, the repair refused without that says the
// same (not --truncate-before, which cannot find the entry after the
// snapshot), and the advice, followed, works (found by an audit: the two
// tools sent the operator back and forth between commands that both failed).
func TestMissingSegmentAroundSnapshotNamesMovingIt(t *testing.T) {
	dir := t.TempDir()
	makeHistory(t, dir, 60)
	segs, si := segmentOf60And61(t, dir)
	if si < 1 {
		t.Fatalf("segments %v: want entries 60 and 61 in a segment neither first nor last", segs)
	}
	first, _ := strconv.ParseUint(segs[si], 10, 64)
	if err := os.Remove(filepath.Join(dir, "wal", segs[si])); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snapshots", "snapshot-00000000000000000060.bolt")
	repair := fmt.Sprintf("kvidx wal repair %s --truncate-after %d --yes", dir, first-1)
	out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err == nil || !strings.Contains(out, "move snapshot-00000000000000000060.bolt out of "+filepath.Join(dir, "snapshots")) || !strings.Contains(out, repair) {
		t.Fatalf("dry run: %v\n%s\nwant a refusal naming the snapshot to move and %q", err, out, repair)
	}
	_, _, err = runKvidx(t, "", "wal", "repair", dir, "--truncate-after", strconv.FormatUint(first-1, 10), "--yes")
	if err == nil || strings.Contains(err.Error(), "--truncate-before") || !strings.Contains(err.Error(), "move it out of") {
		t.Fatalf("repair with the snapshot in place: %v; want a refusal that names moving it, not --truncate-before", err)
	}
	if err := os.Rename(snap, filepath.Join(t.TempDir(), filepath.Base(snap))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-after", strconv.FormatUint(first-1, 10), "--yes"); err != nil {
		t.Fatalf("the repair named, the snapshot moved: %v", err)
	}
	if out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run"); err != nil {
		t.Fatalf("dry run after the repair: %v\n%s", err, out)
	}
}

// segmentOf60And61 returns dir's WAL segments and the index among them of
// the one holding entries 60 and 61, which must be one before the last.
func segmentOf60And61(t *testing.T, dir string) ([]string, int) {
	t.Helper()
	segs := walSegments(t, dir)
	si := -1
	for i, name := range segs {
		if first, _ := strconv.ParseUint(name, 10, 64); first <= 60 {
			si = i
		}
	}
	if si < 0 || si == len(segs)-1 {
		t.Fatalf("segments %v: want entries 60 and 61 in a segment before the last", segs)
	}
	if next, _ := strconv.ParseUint(segs[si+1], 10, 64); next <= 61 {
		t.Fatalf("segments %v: want entries 60 and 61 in one segment", segs)
	}
	return segs, si
}
