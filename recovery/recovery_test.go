package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/logbuf"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

func batches(seed uint64, from, to uint64) [][]engine.Event {
	var out [][]engine.Event
	for b := from; b <= to; b++ {
		out = append(out, genBatch(seed, b))
	}
	return out
}

func TestNewDirAppendReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := mustOpen(t, dir, testOptions())
	if r := s.Report(); !r.Created || r.SnapshotUsed.Path != "" || r.ReplayedEntries != 0 {
		t.Fatalf("report of a new dir: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, FormatFileName)); err != nil || string(b) != "kvidx-data 2\n" {
		t.Fatalf("FORMAT = %q, %v", b, err)
	}
	bs := batches(1, 1, 50)
	var rejected int
	for i, b := range bs {
		idx, res, err := s.Append(context.Background(), b, []wal.Position{{Source: "gen", Seq: uint64(i + 1)}})
		if err != nil || idx != uint64(i+1) {
			t.Fatalf("Append %d: %d, %v", i, idx, err)
		}
		for _, e := range res {
			if e != nil {
				rejected++
			}
		}
	}
	want := model(bs)
	sameState(t, s.Index(), want)
	if rejected == 0 {
		t.Fatal("the generator produced no rejection")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, testOptions())
	defer s.Close()
	r := s.Report()
	if r.Created || r.ReplayedEntries != 50 || r.FirstIndex != 1 || r.LastIndex != 50 || r.ReplayRejected != uint64(rejected) {
		t.Fatalf("report: %+v (rejected live %d)", r, rejected)
	}
	sameState(t, s.Index(), want)
	idx, pos := s.Applied()
	if idx != 50 || len(pos) != 1 || pos[0] != (wal.Position{Source: "gen", Seq: 50}) {
		t.Fatalf("Applied = %d %v", idx, pos)
	}
}

func TestSnapshotTruncateAndFallback(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	bs := batches(2, 1, 90)
	var snaps []uint64
	for i, b := range bs {
		mustAppend(t, s, b, wal.Position{Source: "a", Seq: uint64(i)}, wal.Position{Source: fmt.Sprint("s", i%3), Seq: uint64(i)})
		if (i+1)%30 == 0 {
			_, idx, err := s.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, idx)
			first, _ := s.log.FirstIndex()
			switch len(snaps) {
			case 1:
				if first != 1 {
					t.Fatalf("WAL truncated to %d with one snapshot", first)
				}
			default:
				if want := snaps[len(snaps)-2] + 1; first != want {
					t.Fatalf("after snapshots %v WAL first index %d, want %d", snaps, first, want)
				}
			}
		}
	}
	// Nothing new: the same snapshot.
	p1, i1, _ := s.Snapshot(context.Background())
	p2, i2, err := s.Snapshot(context.Background())
	if err != nil || p1 != p2 || i1 != i2 || i1 != 90 {
		t.Fatalf("idle snapshot: %s %d, %s %d, %v", p1, i1, p2, i2, err)
	}
	mustAppend(t, s, genBatch(2, 91))
	bs = append(bs, genBatch(2, 91))
	_, wantPos := s.Applied()
	s.Close()
	want := model(bs)

	s = mustOpen(t, dir, testOptions())
	r := s.Report()
	if r.SnapshotUsed.Index != 90 || r.ReplayedEntries != 1 || len(r.SnapshotsSkipped) != 0 {
		t.Fatalf("report: %+v", r)
	}
	sameState(t, s.Index(), want)
	if _, pos := s.Applied(); fmt.Sprint(pos) != fmt.Sprint(wantPos) {
		t.Fatalf("positions %v, want %v", pos, wantPos)
	}
	s.Close()

	list, _ := snapshot.List(filepath.Join(dir, SnapshotDirName))
	if len(list) != 2 || list[0].Index != 90 || list[1].Index != 60 {
		t.Fatalf("snapshots kept: %v", list)
	}
	for _, damage := range []string{"truncate", "flip"} {
		t.Run(damage, func(t *testing.T) {
			d := t.TempDir()
			copyDir(t, dir, d)
			newest := filepath.Join(d, SnapshotDirName, filepath.Base(list[0].Path))
			b, _ := os.ReadFile(newest)
			if damage == "truncate" {
				b = b[:len(b)/2]
			} else {
				for i := 2 * 4096; i < len(b); i++ { // every page after bbolt's two meta pages
					b[i] ^= 0x5a
				}
			}
			os.WriteFile(newest, b, 0o640)
			s := mustOpen(t, d, testOptions())
			defer s.Close()
			r := s.Report()
			if r.SnapshotUsed.Index != 60 || r.ReplayedEntries != 31 {
				t.Fatalf("report: %+v", r)
			}
			if len(r.SnapshotsSkipped) != 1 || r.SnapshotsSkipped[0].Path != newest || r.SnapshotsSkipped[0].Reason == "" {
				t.Fatalf("skipped: %+v", r.SnapshotsSkipped)
			}
			t.Logf("skipped %s: %s", filepath.Base(newest), r.SnapshotsSkipped[0].Reason)
			sameState(t, s.Index(), want)
			if _, pos := s.Applied(); fmt.Sprint(pos) != fmt.Sprint(wantPos) {
				t.Fatalf("positions %v, want %v", pos, wantPos)
			}
			// The damaged snapshot is moved aside, so that it does not
			// count among the snapshots kept: the next snapshot keeps
			// the one recovery used, and a damaged new one still falls
			// back to it.
			if _, err := os.Stat(newest + DamagedSuffix); err != nil {
				t.Fatalf("damaged snapshot not moved aside: %v", err)
			}
			mustAppend(t, s, genBatch(2, 92))
			p, _, err := s.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			kept, _ := snapshot.List(filepath.Join(d, SnapshotDirName))
			if len(kept) != 2 || kept[0].Index != 92 || kept[1].Index != 60 {
				t.Fatalf("snapshots kept: %v", kept)
			}
			os.Truncate(p, 100)
			s = mustOpen(t, d, testOptions())
			defer s.Close()
			if r := s.Report(); r.SnapshotUsed.Index != 60 || r.ReplayedEntries != 32 {
				t.Fatalf("report after a second damaged snapshot: %+v", r)
			}
			sameState(t, s.Index(), model(append(bs[:len(bs):len(bs)], genBatch(2, 92))))
		})
	}
	t.Run("both damaged", func(t *testing.T) {
		d := t.TempDir()
		copyDir(t, dir, d)
		for _, f := range list {
			os.Truncate(filepath.Join(d, SnapshotDirName, filepath.Base(f.Path)), 100)
		}
		_, err := Open(context.Background(), d, testOptions())
		if !errors.Is(err, ErrUnrecoverable) || !strings.Contains(err.Error(), "WAL entries 61..91") {
			t.Fatalf("Open = %v", err)
		}
		t.Log(err)
	})
}

func TestEmptyWALAfterSnapshot(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.KeepSnapshots = 1
	s := mustOpen(t, dir, opts)
	bs := batches(3, 1, 20)
	for _, b := range bs {
		mustAppend(t, s, b)
	}
	if _, idx, err := s.Snapshot(context.Background()); err != nil || idx != 20 {
		t.Fatal(idx, err)
	}
	if f, _ := s.log.FirstIndex(); f != 21 {
		t.Fatalf("first index %d", f)
	}
	s.Close()
	s = mustOpen(t, dir, opts)
	if r := s.Report(); r.FirstIndex != 21 || r.LastIndex != 20 || r.SnapshotUsed.Index != 20 || r.ReplayedEntries != 0 {
		t.Fatalf("report %+v", r)
	}
	sameState(t, s.Index(), model(bs))
	if idx := mustAppend(t, s, genBatch(3, 21)); idx != 21 {
		t.Fatalf("next append got index %d, want 21", idx)
	}
	s.Close()

	// Without its snapshot, an emptied WAL cannot be recovered.
	os.RemoveAll(filepath.Join(dir, SnapshotDirName))
	_, err := Open(context.Background(), dir, opts)
	if !errors.Is(err, ErrUnrecoverable) || !strings.Contains(err.Error(), "entries 1..20 are gone") {
		t.Fatalf("Open = %v", err)
	}
	t.Log(err)
}

func TestWALBehindSnapshot(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	bs := batches(4, 1, 30)
	for i, b := range bs {
		mustAppend(t, s, b)
		if i == 9 {
			s.Snapshot(context.Background())
		}
	}
	s.Snapshot(context.Background())
	s.Close()
	// Lose the WAL tail (entries 26..30) but keep snapshot 30: refuse.
	if err := wal.RepairTruncateAfter(filepath.Join(dir, WALDirName), 25, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), dir, testOptions())
	if !errors.Is(err, ErrUnrecoverable) || !strings.Contains(err.Error(), "acknowledged entries 26..30 are missing") {
		t.Fatalf("Open = %v", err)
	}
	t.Log(err)
	// The operator accepts the loss by removing the newer snapshot.
	os.Remove(filepath.Join(dir, SnapshotDirName, snapshot.FileName(30)))
	s = mustOpen(t, dir, testOptions())
	defer s.Close()
	if r := s.Report(); r.SnapshotUsed.Index != 10 || r.ReplayedEntries != 15 {
		t.Fatalf("report %+v", r)
	}
	sameState(t, s.Index(), model(bs[:25]))
	if idx := mustAppend(t, s, nil); idx != 26 {
		t.Fatalf("next index %d", idx)
	}
}

func TestDeletedWAL(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	for _, b := range batches(5, 1, 10) {
		mustAppend(t, s, b)
	}
	s.Snapshot(context.Background())
	s.Close()
	segs, _ := wal.Segments(filepath.Join(dir, WALDirName))
	for _, sg := range segs {
		os.Remove(filepath.Join(dir, WALDirName, sg.Name))
	}
	_, err := Open(context.Background(), dir, testOptions())
	if !errors.Is(err, ErrUnrecoverable) {
		t.Fatalf("Open = %v", err)
	}
	t.Log(err)
}

func TestMissingMiddleSegment(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.SegmentSize = 2048
	s := mustOpen(t, dir, opts)
	bs := batches(6, 1, 400)
	for _, b := range bs {
		mustAppend(t, s, b)
	}
	s.Close()
	walDir := filepath.Join(dir, WALDirName)
	segs, _ := wal.Segments(walDir)
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	// A clean log opens.
	s = mustOpen(t, dir, opts)
	sameState(t, s.Index(), model(bs))
	s.Close()
	mid := segs[len(segs)/2]
	next := segs[len(segs)/2+1]
	os.Remove(filepath.Join(walDir, mid.Name))
	_, err := Open(context.Background(), dir, opts)
	want := fmt.Sprintf("entries %d..%d are missing", mid.FirstIndex, next.FirstIndex-1)
	if !errors.Is(err, ErrUnrecoverable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open = %v, want an error naming %q", err, want)
	}
	t.Log(err)
}

// The last WAL segment deleted (found by an acceptance audit: it opened
// as a shorter log, the acknowledged entries 381..400 gone without a word).
// With no snapshot past the entries left, the refusal names the cut that
// accepts the loss; with one, the repair that continues after it.
func TestMissingLastSegment(t *testing.T) {
	for _, snapAfter := range []int{40, 390} {
		t.Run(fmt.Sprintf("snapshot after %d", snapAfter), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions()
			opts.SegmentSize = 2048
			writeHistory(t, dir, opts, 9, 400, 20, snapAfter)
			walDir := filepath.Join(dir, WALDirName)
			segs, _ := wal.Segments(walDir)
			last := segs[len(segs)-1]
			if past := uint64(snapAfter) >= last.FirstIndex; past != (snapAfter > 40) {
				t.Fatalf("snapshot at %d, last segment %s: the test needs the second one in it", snapAfter, last.Name)
			}
			os.Remove(filepath.Join(walDir, last.Name))
			_, err := Open(context.Background(), dir, opts)
			want := fmt.Sprintf("kvidx wal repair %s --truncate-after %d --yes", dir, last.FirstIndex-1)
			if snapAfter > 40 {
				want = fmt.Sprintf("kvidx wal repair %s --truncate-before %d --yes", dir, snapAfter+1)
			}
			// Putting the files back loses nothing: it comes first (a
			// review found the snapshot's repair offered alone, which loses
			// the entries after the snapshot that the files held).
			if !errors.Is(err, ErrUnrecoverable) || !strings.Contains(err.Error(), last.Name+" is missing") || !strings.Contains(err.Error(), want) ||
				!strings.Contains(err.Error(), wal.PutBack) {
				t.Fatalf("Open = %v, want a refusal naming segment %s, %q and %q", err, last.Name, wal.PutBack, want)
			}
			// The way out it names, then a restart with what is left.
			kept := last.FirstIndex - 1
			if snapAfter > 40 {
				kept = uint64(snapAfter)
				_, err = wal.RepairTruncateBefore(walDir, kept+1, t.TempDir(), false)
			} else {
				err = wal.RepairTruncateAfter(walDir, kept, t.TempDir())
			}
			if err != nil {
				t.Fatal(err)
			}
			s := mustOpen(t, dir, opts)
			defer s.Close()
			sameState(t, s.Index(), model(batches(9, 1, kept)))
		})
	}
}

func TestGapBeforeSnapshotIsHarmless(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.SegmentSize = 2048
	opts.KeepSnapshots = 5
	s := mustOpen(t, dir, opts)
	bs := batches(7, 1, 300)
	for _, b := range bs {
		mustAppend(t, s, b)
	}
	s.Snapshot(context.Background())
	for _, b := range batches(7, 301, 320) {
		mustAppend(t, s, b)
	}
	bs = append(bs, batches(7, 301, 320)...)
	s.Close()
	walDir := filepath.Join(dir, WALDirName)
	segs, _ := wal.Segments(walDir)
	os.Remove(filepath.Join(walDir, segs[1].Name))
	s = mustOpen(t, dir, opts)
	defer s.Close()
	if r := s.Report(); r.SnapshotUsed.Index != 300 || r.ReplayedEntries != 20 {
		t.Fatalf("report %+v", r)
	}
	sameState(t, s.Index(), model(bs))
}

func TestFormat(t *testing.T) {
	for _, c := range []struct{ content, want string }{
		{"kvidx-data 3\n", "format version 3 is newer"},
		{"kvidx-data x\n", "holds version"},
		{"something else\n", "FORMAT is"},
		{"kvidx-data 2", "FORMAT is"},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, FormatFileName), []byte(c.content), 0o640)
		_, err := Open(context.Background(), dir, testOptions())
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("FORMAT %q: Open = %v", c.content, err)
		}
		if _, err := os.Stat(filepath.Join(dir, WALDirName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("FORMAT %q: refused open created the wal dir", c.content)
		}
	}
	// A format 1 directory (its WAL of version 1 frames) opens, and is
	// upgraded before anything is appended: a kvidx of format 1 would cut
	// version 2 frames as a torn tail, and must refuse the directory.
	{
		dir := t.TempDir()
		s := mustOpen(t, dir, testOptions())
		mustAppend(t, s, genBatch(1, 1))
		s.Close()
		os.WriteFile(filepath.Join(dir, FormatFileName), []byte("kvidx-data 1\n"), 0o640)
		s = mustOpen(t, dir, testOptions())
		mustAppend(t, s, genBatch(1, 2))
		s.Close()
		if b, _ := os.ReadFile(filepath.Join(dir, FormatFileName)); string(b) != "kvidx-data 2\n" {
			t.Fatalf("FORMAT after opening a format 1 directory: %q", b)
		}
		// An Open that refuses a format 1 directory leaves its FORMAT as it
		// was (it was upgraded before the refusal). Found by review.
		os.WriteFile(filepath.Join(dir, FormatFileName), []byte("kvidx-data 1\n"), 0o640)
		os.RemoveAll(filepath.Join(dir, SnapshotDirName))
		segs, _ := filepath.Glob(filepath.Join(dir, WALDirName, "0*"))
		b, err := os.ReadFile(segs[0])
		if err != nil {
			t.Fatal(err)
		}
		b[3] ^= 0xff // entry 1's CRC: damage that a valid entry follows
		os.WriteFile(segs[0], b, 0o640)
		if _, err := Open(context.Background(), dir, testOptions()); !errors.Is(err, wal.ErrCorrupt) {
			t.Fatalf("a directory damaged inside its WAL: Open = %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, FormatFileName)); string(b) != "kvidx-data 1\n" {
			t.Fatalf("FORMAT after a refused open: %q", b)
		}
	}
	// Data without a FORMAT file.
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	mustAppend(t, s, genBatch(1, 1))
	s.Close()
	os.Remove(filepath.Join(dir, FormatFileName))
	if _, err := Open(context.Background(), dir, testOptions()); !errors.Is(err, ErrFormat) {
		t.Fatalf("Open = %v", err)
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	_, err := Open(context.Background(), dir, testOptions())
	if !errors.Is(err, wal.ErrLocked) {
		t.Fatalf("second Open = %v", err)
	}
	s.Close()
	s = mustOpen(t, dir, testOptions())
	s.Close()
	if _, _, err := s.Append(context.Background(), nil, nil); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if _, _, err := s.Snapshot(context.Background()); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("Snapshot after Close = %v", err)
	}
}

func TestTempFileRemoved(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	s.Close()
	tmp := filepath.Join(dir, SnapshotDirName, ".snapshot-00000000000000000007.tmp-123")
	os.WriteFile(tmp, []byte("partial"), 0o640)
	s = mustOpen(t, dir, testOptions())
	defer s.Close()
	if r := s.Report(); len(r.TempFilesRemoved) != 1 {
		t.Fatalf("report %+v", r)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("temp file still there")
	}
}

// Concurrent appends and snapshots: the commit order is the apply order,
// and every snapshot is a consistent cut.
func TestConcurrentAppendSnapshot(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	opts.KeepSnapshots = 1000 // keep the whole WAL to rebuild the model
	s := mustOpen(t, dir, opts)
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range uint64(100) {
				if _, _, err := s.Append(context.Background(), genBatch(uint64(10+p), b), []wal.Position{{Source: fmt.Sprint("p", p), Seq: b}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 10 {
			if _, _, err := s.Snapshot(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	var all [][]engine.Event
	var posAt []map[string]uint64 // posAt[i]: each source's position after entry i+1
	cur := map[string]uint64{}
	for e, err := range s.log.Entries(0) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e.Events)
		for _, p := range e.Positions {
			cur[p.Source] = p.Seq
		}
		posAt = append(posAt, maps.Clone(cur))
	}
	want := model(all)
	sameState(t, s.Index(), want)
	s.Close()
	// Every snapshot equals the model cut at its index, and carries the
	// source positions of the entries up to its index, no later ones.
	list, _ := snapshot.List(filepath.Join(dir, SnapshotDirName))
	for _, f := range list {
		ix, meta, err := snapshot.Load(context.Background(), f.Path)
		if err != nil {
			t.Fatal(err)
		}
		sameState(t, ix, model(all[:f.Index]))
		got := map[string]uint64{}
		for _, src := range meta.Sources {
			got[src.Name] = src.Seq
		}
		if f.Index > 0 && !maps.Equal(got, posAt[f.Index-1]) {
			t.Fatalf("snapshot at %d: sources %v, want %v", f.Index, got, posAt[f.Index-1])
		}
	}
	s = mustOpen(t, dir, opts)
	defer s.Close()
	sameState(t, s.Index(), want)
	_, pos := s.Applied()
	if len(pos) != 4 {
		t.Fatalf("positions %v", pos)
	}
	for _, p := range pos {
		if p.Seq != 99 {
			t.Fatalf("positions %v", pos)
		}
	}
}

// TestOpenCancelledStopsRecovery: a cancelled context (kvidx serve's
// SIGINT or SIGTERM during recovery) ends a snapshot load or a WAL replay
// promptly, not at the next progress line a second later, and the
// directory opens as before afterwards.
func TestOpenCancelledStopsRecovery(t *testing.T) {
	tests := []struct {
		name     string
		snapshot bool
	}{
		{"replay", false},
		{"snapshot load", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := dirOf300Entries(t, tt.snapshot)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			opts := testOptions()
			opts.ProgressInterval = time.Hour // no progress line comes
			if s, err := Open(ctx, dir, opts); !errors.Is(err, context.Canceled) {
				if err == nil {
					s.Close()
				}
				t.Fatalf("Open with a cancelled context: %v, want context.Canceled", err)
			}
			s := mustOpen(t, dir, testOptions())
			defer s.Close()
			if got, _ := s.Applied(); got != 300 {
				t.Fatalf("applied index after the stopped recovery: %d, want 300", got)
			}
		})
	}
}

// dirOf300Entries returns a closed data dir of 300 WAL entries, with a
// snapshot of them all when snapshot is set.
func dirOf300Entries(t *testing.T, snapshot bool) string {
	t.Helper()
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions())
	for _, b := range batches(8, 1, 300) {
		mustAppend(t, s, b)
	}
	if snapshot {
		if _, _, err := s.Snapshot(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestProgressLogged: a snapshot load and a WAL replay log their progress
// (at every chance, with a progress interval of 1 ns), and no more often
// than the interval (none within an hour's interval; the default is 1 s).
func TestProgressLogged(t *testing.T) {
	tests := []struct {
		name     string
		snapshot bool
		interval time.Duration
		want     []string
		absent   []string
	}{
		{"replay", false, time.Nanosecond, []string{"percent=", "entries_per_s=", "replayed_entries=300"}, nil},
		{"snapshot load", true, time.Nanosecond, []string{`msg="loading snapshot"`, "percent=100.0", "places_per_s="}, nil},
		{"replay, hourly", false, time.Hour, []string{"replayed_entries=300"}, []string{"entries_per_s="}},
		{"snapshot load, hourly", true, time.Hour, nil, []string{`msg="loading snapshot"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := dirOf300Entries(t, tt.snapshot)
			var buf logbuf.Buffer
			opts := testOptions()
			opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
			opts.ProgressInterval = tt.interval
			s := mustOpen(t, dir, opts)
			s.Close()
			out := buf.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Fatalf("log lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(out, a) {
					t.Fatalf("progress logged within an interval of %v (%q):\n%s", tt.interval, a, out)
				}
			}
		})
	}
}

// TestSnapshotAtSameIndexStillRetains checks that a snapshot call that finds
// the newest snapshot already at the applied index (a store reopened after a
// clean stop, as kvidx recover does) still applies the store's retention: a
// lower KeepSnapshots than the writer's prunes the older snapshots and
// truncates the WAL.
func TestSnapshotAtSameIndexStillRetains(t *testing.T) {
	for _, tc := range []struct {
		keep      int
		wantSnaps int
		wantFirst uint64
	}{
		{keep: 3, wantSnaps: 3, wantFirst: 11}, // as written: nothing more to drop
		{keep: 2, wantSnaps: 2, wantFirst: 21},
		{keep: 1, wantSnaps: 1, wantFirst: 31},
	} {
		t.Run(fmt.Sprintf("keep%d", tc.keep), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions()
			opts.KeepSnapshots = 3
			s := mustOpen(t, dir, opts)
			bs := batches(5, 1, 30)
			for i, b := range bs {
				mustAppend(t, s, b)
				if (i+1)%10 == 0 {
					if _, _, err := s.Snapshot(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}
			s.Close()

			opts.KeepSnapshots = tc.keep
			s = mustOpen(t, dir, opts)
			defer s.Close()
			if _, idx, err := s.Snapshot(context.Background()); err != nil || idx != 30 {
				t.Fatalf("snapshot: %d, %v", idx, err)
			}
			list, err := snapshot.List(filepath.Join(dir, SnapshotDirName))
			if err != nil || len(list) != tc.wantSnaps || list[0].Index != 30 {
				t.Fatalf("snapshots %+v (%v), want %d, the newest at 30", list, err, tc.wantSnaps)
			}
			if f, _ := s.log.FirstIndex(); f != tc.wantFirst {
				t.Fatalf("WAL first index %d, want %d", f, tc.wantFirst)
			}
			sameState(t, s.Index(), model(bs))
		})
	}
}

// A long-running node takes a snapshot every few minutes for months: what
// the Store remembers of its snapshot files must stay as small as the
// files kept, not grow by one entry a snapshot (found by a soak audit).
func TestRetentionForgetsPrunedSnapshots(t *testing.T) {
	for _, tc := range []struct {
		keep, snapshots int
	}{
		{keep: 1, snapshots: 12},
		{keep: 2, snapshots: 12},
		{keep: 3, snapshots: 5},
	} {
		t.Run(fmt.Sprintf("keep%d", tc.keep), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions()
			opts.KeepSnapshots = tc.keep
			s := mustOpen(t, dir, opts)
			defer s.Close()
			for i := range tc.snapshots {
				mustAppend(t, s, genBatch(7, uint64(i+1)))
				if _, _, err := s.Snapshot(context.Background()); err != nil {
					t.Fatalf("snapshot %d: %v", i, err)
				}
			}
			list, err := snapshot.List(filepath.Join(dir, SnapshotDirName))
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != tc.keep {
				t.Fatalf("%d snapshot files, want %d", len(list), tc.keep)
			}
			s.snapMu.Lock()
			counted, unusable := len(s.counted), len(s.unusable)
			s.snapMu.Unlock()
			if counted > tc.keep || unusable != 0 {
				t.Fatalf("after %d snapshots keeping %d, the store remembers %d counted and %d unusable files", tc.snapshots, tc.keep, counted, unusable)
			}
		})
	}
}

// A data directory whose only snapshot, which the WAL was truncated
// behind, is named by an entry recovery passes over (a symbolic link whose
// target is gone, a directory): the refusal names that entry, which may be
// the snapshot it needs, rather than only calling the entries it holds
// gone. Found by an audit: a snapshot linked from a volume not mounted
// read as "entries 1..10 are gone".
func TestRefusalNamesPassedOverSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, path string)
		want    string
	}{
		{"dangling link", func(t *testing.T, path string) {
			if err := os.Symlink(filepath.Join(t.TempDir(), "unmounted", filepath.Base(path)), path); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link to"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o750); err != nil {
				t.Fatal(err)
			}
		}, "is a directory, not a snapshot file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, testOptions())
			for _, b := range batches(3, 1, 10) {
				mustAppend(t, s, b)
			}
			if _, _, err := s.Snapshot(context.Background()); err != nil {
				t.Fatal(err)
			}
			s.Close()
			if _, err := wal.RepairTruncateBefore(filepath.Join(dir, WALDirName), 11, t.TempDir(), false); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, SnapshotDirName, snapshot.FileName(10))
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			tc.replace(t, path)
			_, err := Open(context.Background(), dir, testOptions())
			if !errors.Is(err, ErrUnrecoverable) || !strings.Contains(err.Error(), path+" "+tc.want) {
				t.Fatalf("Open = %v\nwant a refusal saying %s %s", err, path, tc.want)
			}
		})
	}
}

// A data directory path that names a file (or is empty) is refused as
// such, not by the first file looked for inside it ("open F/FORMAT: not a
// directory", found by an audit), and the file is left as it was.
func TestOpenRefusesDataDirThatIsNoDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, []byte("notes\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{file, "data dir " + file + " is not a directory"},
		{"", "the data directory path is empty"},
	} {
		_, err := Open(context.Background(), tc.dir, testOptions())
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v, want %q", tc.dir, err, tc.want)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "notes\n" {
		t.Fatalf("the file changed: %q, %v", b, err)
	}
}

// TestTornTailReported: a torn tail on the WAL's last segment is cut at
// Open, and the report (and its log line) says how many bytes were
// dropped, the "torn-tail bytes dropped"; every whole entry is
// replayed.
func TestTornTailReported(t *testing.T) {
	tests := []struct {
		name string
		tail []byte
	}{
		{"partial frame", []byte{0x40, 0x01, 0x02, 0x03}},
		{"zeros", make([]byte, 100)},
		{"none", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bs := batches(3, 1, 20)
			s := mustOpen(t, dir, testOptions())
			for _, b := range bs {
				mustAppend(t, s, b)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			walDir := filepath.Join(dir, WALDirName)
			segs, err := wal.Segments(walDir)
			if err != nil || len(segs) == 0 {
				t.Fatalf("segments %v: %v", segs, err)
			}
			f, err := os.OpenFile(filepath.Join(walDir, segs[len(segs)-1].Name), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(tt.tail); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			var buf logbuf.Buffer
			opts := testOptions()
			opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
			s = mustOpen(t, dir, opts)
			defer s.Close()
			r := s.Report()
			if r.TornBytesDropped != int64(len(tt.tail)) || r.ReplayedEntries != 20 || r.LastIndex != 20 {
				t.Fatalf("report %+v, want %d torn bytes dropped and 20 entries replayed", r, len(tt.tail))
			}
			if want := fmt.Sprintf("torn_bytes=%d", len(tt.tail)); !strings.Contains(buf.String(), want) {
				t.Fatalf("log lacks %q:\n%s", want, buf.String())
			}
			sameState(t, s.Index(), model(bs))
		})
	}
}
