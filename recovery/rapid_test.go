package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
	"pgregory.net/rapid"
)

// TestRecoveryProperty: whatever the event stream, snapshot points, restarts
// and crash images (copies of the data directory, with the WAL cut at an
// entry boundary), the recovered state equals a fresh engine fed exactly the
// events of the surviving history, and the next append continues it.
func TestRecoveryProperty(t *testing.T) {
	root := t.TempDir()
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp(root, "prop")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		seed := rapid.Uint64().Draw(rt, "seed")
		opts := testOptions()
		opts.KeepSnapshots = rapid.IntRange(1, 3).Draw(rt, "keep")
		if rapid.Bool().Draw(rt, "small segments") {
			opts.SegmentSize = 1024
		}
		if rapid.Bool().Draw(rt, "reserve") { // an index sized at every open
			opts.ReserveHolderBlocks = rapid.SampledFrom([]int{1, 50, 5000}).Draw(rt, "reserve blocks")
			opts.ReserveWorkerKeys = rapid.IntRange(1, 4).Draw(rt, "reserve keys")
		}
		var history [][]engine.Event // history[i] = events of entry i+1
		s := mustOpen(rt, dir, opts)
		defer func() { s.Close() }()
		next := uint64(1)
		nops := rapid.IntRange(1, 60).Draw(rt, "ops")
		for range nops {
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
			case op < 6: // append
				evs := genBatch(seed, next)
				next++
				idx := mustAppend(rt, s, evs)
				if idx != uint64(len(history)+1) {
					rt.Fatalf("append got index %d, want %d", idx, len(history)+1)
				}
				history = append(history, evs)
			case op < 8: // snapshot
				_, idx, err := s.Snapshot(context.Background())
				if err != nil {
					rt.Fatal(err)
				}
				if idx != uint64(len(history)) {
					rt.Fatalf("snapshot at %d, history %d", idx, len(history))
				}
			case op == 8: // restart without a final snapshot
				s.Close()
				s = mustOpen(rt, dir, opts)
				checkRecovered(rt, s, history)
			default: // crash image, maybe with the WAL cut
				crashImage(rt, s, dir, opts, history)
			}
		}
		crashImage(rt, s, dir, opts, history)
		s.Close()
		s = mustOpen(rt, dir, opts)
		checkRecovered(rt, s, history)
	})
}

func checkRecovered(t tb, s *Store, history [][]engine.Event) {
	t.Helper()
	idx, _ := s.Applied()
	if idx != uint64(len(history)) {
		t.Fatalf("recovered applied index %d, want %d (report %+v)", idx, len(history), s.Report())
	}
	r := s.Report()
	if r.SnapshotUsed.Index+r.ReplayedEntries != uint64(len(history)) {
		t.Fatalf("report %+v does not cover %d entries", r, len(history))
	}
	sameState(t, s.Index(), model(history))
}

// crashImage copies the data directory while nothing runs, optionally cuts
// the copy's WAL after a random entry, and recovers the copy.
func crashImage(t *rapid.T, s *Store, dir string, opts Options, history [][]engine.Event) {
	img, err := os.MkdirTemp(filepath.Dir(dir), "img")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(img)
	copyDir(t, dir, img)
	first, _ := s.log.FirstIndex()
	last, _ := s.log.LastIndex()
	cut := last
	if rapid.Bool().Draw(t, "cut") {
		cut = rapid.Uint64Range(first-1, last).Draw(t, "cut after")
		backup, _ := os.MkdirTemp(filepath.Dir(dir), "bak")
		defer os.RemoveAll(backup)
		// A cut after the last entry changes nothing (and says so).
		if err := wal.RepairTruncateAfter(filepath.Join(img, WALDirName), cut, backup); err != nil && !(cut == last && errors.Is(err, wal.ErrNothingToCut)) {
			t.Fatalf("cut after %d (first %d last %d): %v", cut, first, last, err)
		}
	}
	snaps, _ := snapshot.List(filepath.Join(img, SnapshotDirName))
	newer := len(snaps) > 0 && snaps[0].Index > cut
	rs, err := Open(context.Background(), img, opts)
	if newer {
		// Acknowledged entries after the cut are inside a snapshot: refuse.
		if !errors.Is(err, ErrUnrecoverable) {
			t.Fatalf("WAL cut at %d below snapshot %d: Open = %v", cut, snaps[0].Index, err)
		}
		for _, f := range snaps {
			if f.Index > cut {
				os.Remove(f.Path)
			}
		}
		rs, err = Open(context.Background(), img, opts)
	}
	if err != nil {
		// Only legitimate when the cut left nothing that covers the history.
		rest, _ := snapshot.List(filepath.Join(img, SnapshotDirName))
		if errors.Is(err, ErrUnrecoverable) && first > 1 && len(rest) == 0 {
			return
		}
		t.Fatalf("crash image (cut %d, WAL %d..%d): %v", cut, first, last, err)
	}
	defer rs.Close()
	checkRecovered(t, rs, history[:cut])
	// The next append continues the surviving history.
	if idx := mustAppend(t, rs, genBatch(99, cut)); idx != cut+1 {
		t.Fatalf("append after recovery got %d, want %d", idx, cut+1)
	}
}
