package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// makeHistory writes 120 entries to dir with snapshots at snaps.
func makeHistory(t *testing.T, dir string, snaps ...int) {
	t.Helper()
	s := openStore(t, dir)
	hist := genHistory(5, 120)
	done := 0
	for _, k := range snaps {
		appendAll(t, s, hist[done:k], uint64(done+1))
		done = k
		if _, idx, err := s.Snapshot(context.Background()); err != nil || idx != uint64(k) {
			t.Fatalf("snapshot: %d, %v", idx, err)
		}
	}
	appendAll(t, s, hist[done:], uint64(done+1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// segmentHolding returns the path of the WAL segment holding entry index.
func segmentHolding(t *testing.T, dir string, index uint64) (string, uint64) {
	t.Helper()
	var name string
	var first uint64
	for _, n := range walSegments(t, dir) {
		if f, _ := strconv.ParseUint(n, 10, 64); f <= index {
			name, first = n, f
		}
	}
	return filepath.Join(dir, "wal", name), first
}

// entryOffset returns the offset of entry index's tidwall/wal frame
// (length prefix) and of its payload in the segment holding it.
func entryOffset(t *testing.T, dir string, index uint64) (string, int, int) {
	t.Helper()
	path, first := segmentHolding(t, dir, index)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for i := first; ; i++ {
		n, hn := binary.Uvarint(b[off:])
		if hn <= 0 {
			t.Fatalf("entry %d not found in %s", index, path)
		}
		if i == index {
			return path, off, off + hn
		}
		off += hn + int(n)
	}
}

// flipCRC damages entry index's checksum, leaving the framing whole.
func flipCRC(t *testing.T, dir string, index uint64) {
	t.Helper()
	path, _, p := entryOffset(t, dir, index)
	flipByte(t, path, p+1)
}

// A snapshot past the cut whose next entry is damaged in the last
// segment: --truncate-before past it cannot be run, so the refusal of
// --truncate-after must not name it (it named it: wal.Locatable reported
// true whenever Inspect failed, as it does for damage in the last segment,
// and the two refusals sent the operator back and forth).
func TestTruncateAfterRefusalEntryAfterSnapshotDamaged(t *testing.T) {
	dir := t.TempDir()
	makeHistory(t, dir, 110)
	if p106, _ := segmentHolding(t, dir, 106); p106 != filepath.Join(dir, "wal", walSegments(t, dir)[len(walSegments(t, dir))-1]) {
		t.Fatalf("entry 106 in %s: want the last segment", p106)
	}
	flipCRC(t, dir, 106)
	flipCRC(t, dir, 111)
	if _, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-before", "111", "--yes"); err == nil {
		t.Fatal("--truncate-before 111 succeeded with entry 111 damaged")
	}
	// The startup refusal does not name that cut either, but moving the
	// snapshot aside (recovery.DamageRefusal).
	out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err == nil || strings.Contains(out, "--truncate-before 111") || !strings.Contains(out, "snapshot-00000000000000000110.bolt, past the damage, cannot be continued") {
		t.Fatalf("dry run: %v\n%s\nwant a refusal naming moving snapshot 110, not --truncate-before 111", err, out)
	}
	_, _, err = runKvidx(t, "", "wal", "repair", dir, "--truncate-after", "105", "--yes")
	if err == nil || strings.Contains(err.Error(), "--truncate-before 111") || !strings.Contains(err.Error(), "move it out of") {
		t.Fatalf("repair: %v; want a refusal naming moving the snapshot, not --truncate-before 111", err)
	}
	snap := filepath.Join(dir, "snapshots", "snapshot-00000000000000000110.bolt")
	if err := os.Rename(snap, filepath.Join(t.TempDir(), filepath.Base(snap))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-after", "105", "--yes"); err != nil {
		t.Fatalf("the advice followed: %v", err)
	}
	if out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run"); err != nil {
		t.Fatalf("dry run after the repair: %v\n%s", err, out)
	}
}

// A cut before the log's first entry, the log beginning right after the
// only snapshot: the refusal called that snapshot useless ("entry 31 after
// it cannot be read") and said to move it aside, which leaves a directory
// that no recovery can start from.
func TestTruncateAfterBeforeTheLogKeepsTheSnapshot(t *testing.T) {
	dir := t.TempDir()
	makeHistory(t, dir, 30, 60)
	if segs := walSegments(t, dir); segs[0] != "00000000000000000031" {
		t.Fatalf("segments %v: want the log to begin at 31", segs)
	}
	if err := os.Rename(filepath.Join(dir, "snapshots", "snapshot-00000000000000000060.bolt"), filepath.Join(t.TempDir(), "s60")); err != nil {
		t.Fatal(err)
	}
	_, _, err := runKvidx(t, "", "wal", "repair", dir, "--truncate-after", "10", "--yes")
	if err == nil || strings.Contains(err.Error(), "move it out") || strings.Contains(err.Error(), "cannot be read") {
		t.Fatalf("repair: %v; want the cut refused as before the log, the snapshot kept", err)
	}
}

// A misnamed snapshot (named 60, its meta 40) past damage in a middle
// segment: the repair refuses it for --truncate-before 61, and it does not
// hold the damaged entry 55, so the refusal must not name that cut.
func TestBrokenFramingMisnamedSnapshot(t *testing.T) {
	dir := t.TempDir()
	makeHistory(t, dir, 40)
	sd := filepath.Join(dir, "snapshots")
	if err := os.Rename(filepath.Join(sd, "snapshot-00000000000000000040.bolt"), filepath.Join(sd, "snapshot-00000000000000000060.bolt")); err != nil {
		t.Fatal(err)
	}
	path, off, _ := entryOffset(t, dir, 55)
	if p61, _ := segmentHolding(t, dir, 61); p61 != path || path == filepath.Join(dir, "wal", walSegments(t, dir)[len(walSegments(t, dir))-1]) {
		t.Fatalf("want entries 55 and 61 in one segment before the last")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[off:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run")
	if err == nil || strings.Contains(out, "--truncate-before 61") {
		t.Fatalf("dry run: %v\n%s\nwant no --truncate-before 61 (the snapshot named 60 holds entries up to 40)", err, out)
	}
	args := advisedRepair(dir, out)
	if args == nil {
		t.Fatalf("no repair advised:\n%s", out)
	}
	if _, _, err := runKvidx(t, "", args...); err != nil {
		t.Fatalf("the repair advised, %v: %v", args, err)
	}
	if out, _, err := runKvidx(t, "", "recover", "--data-dir", dir, "--dry-run"); err != nil {
		t.Fatalf("dry run after the repair: %v\n%s", err, out)
	}
}
