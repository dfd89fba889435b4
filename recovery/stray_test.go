package recovery

import (
	"strings"
	"testing"

	"github.com/kvidx/kvidx/snapshot"
)

// The refusal names --trim-stray only when removing stray bytes makes the
// WAL whole from index 1 or from a snapshot on: with another gap, or no
// start, it names what it did before.
func TestStrayRefusal(t *testing.T) {
	stray := Span{From: 10, To: 19, Keep: 19, Stray: 3}
	missing := Span{From: 30, To: 39, Keep: 29}
	snap := snapshot.File{Path: "d/snapshots/" + snapshot.FileName(49), Index: 49}
	cases := []struct {
		name         string
		snaps        []snapshot.File
		first, last  uint64
		gaps         []Span
		trim, advice bool
	}{
		{"stray only, from 1", nil, 1, 100, []Span{stray}, true, true},
		{"two stray", nil, 1, 100, []Span{stray, {From: 40, To: 44, Keep: 44, Stray: 1}}, true, true},
		{"stray and missing", nil, 1, 100, []Span{stray, missing}, false, true},
		{"stray, WAL from 50, no snapshot", nil, 50, 100, []Span{{From: 60, To: 69, Keep: 69, Stray: 2}}, false, false},
		{"stray, WAL from 50, snapshot at 49", []snapshot.File{snap}, 50, 100, []Span{{From: 60, To: 69, Keep: 69, Stray: 2}}, true, true},
		// Found by review: a snapshot past the gap that recovery could not
		// load is no start once the bytes are trimmed.
		{"stray, WAL from 50, snapshot past the gap", []snapshot.File{{Path: "d/snapshots/" + snapshot.FileName(79), Index: 79}}, 50, 100, []Span{{From: 60, To: 69, Keep: 69, Stray: 2}}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			contig := c.first
			for _, g := range c.gaps {
				contig = max(contig, g.To+1)
			}
			msg := NoSnapshotRefusal("d", c.snaps, c.first, c.last, contig, c.gaps)
			if got := strings.Contains(msg, "kvidx wal repair d --trim-stray --yes"); got != c.trim {
				t.Fatalf("names --trim-stray: %v, want %v: %s", got, c.trim, msg)
			}
			if got := strings.Contains(msg, "kvidx wal repair"); got != c.advice {
				t.Fatalf("names a repair: %v, want %v: %s", got, c.advice, msg)
			}
		})
	}
}

// A log truncated behind a snapshot whose first segment is unreadable is
// refused naming the unreadable entries, not "entries 1..N are gone"
// (found by audit: the snapshots hold entries 1..50, and only 31..59 were
// damaged).
func TestRefusalNamesUnreadableAfterTruncation(t *testing.T) {
	snaps := []snapshot.File{
		{Path: "d/snapshots/" + snapshot.FileName(50), Index: 50},
		{Path: "d/snapshots/" + snapshot.FileName(30), Index: 30},
	}
	msg := NoSnapshotRefusal("d", snaps, 31, 60, 60, []Span{{From: 31, To: 59, Keep: 30, Broken: true}})
	if !strings.Contains(msg, "entries 31..59 are missing or unreadable") || strings.Contains(msg, "1..59 are gone") {
		t.Fatalf("refusal: %s", msg)
	}
}
