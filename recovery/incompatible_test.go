package recovery

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvidx/kvidx/internal/snaptest"
	"github.com/kvidx/kvidx/snapshot"
)

// A snapshot that a newer kvidx wrote (a snapshot format version this build
// does not read, its meta intact) is not damaged: recovery falls back to an
// older one but must leave it under its name (a downgrade, then an upgrade,
// finds it again) and not count it among the snapshots kept. It was renamed
// *.bolt.damaged like a corrupt file.
func TestNewerFormatSnapshotNotMovedAside(t *testing.T) {
	for _, c := range []struct {
		name, key string
		val       []byte
	}{
		{"newer format version", "format", binary.BigEndian.AppendUint32(nil, snapshot.FormatVersion+1)},
		{"other hash seed", "hash_seed", binary.BigEndian.AppendUint64(nil, 12345)},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, testOptions())
			bs := batches(9, 1, 30)
			for i, b := range bs {
				mustAppend(t, s, b)
				if i == 9 || i == 19 {
					if _, _, err := s.Snapshot(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}
			s.Close()
			newer := filepath.Join(dir, SnapshotDirName, snapshot.FileName(20))
			snaptest.SetMeta(t, newer, c.key, c.val)

			s = mustOpen(t, dir, testOptions())
			r := s.Report()
			if r.SnapshotUsed.Index != 10 || r.ReplayedEntries != 20 || len(r.SnapshotsSkipped) != 1 {
				t.Fatalf("report %+v", r)
			}
			sameState(t, s.Index(), model(bs))
			if _, err := os.Stat(newer); err != nil {
				t.Fatalf("the newer build's snapshot was moved: %v", err)
			}
			// It does not count among the K kept: the next snapshot keeps
			// the one recovery used and the WAL after it.
			mustAppend(t, s, genBatch(9, 31))
			if _, _, err := s.Snapshot(context.Background()); err != nil {
				t.Fatal(err)
			}
			s.Close()
			kept, _ := snapshot.List(filepath.Join(dir, SnapshotDirName))
			if len(kept) != 3 || kept[2].Index != 10 {
				t.Fatalf("kept %+v", kept)
			}
			s = mustOpen(t, dir, testOptions())
			defer s.Close()
			if r := s.Report(); r.SnapshotUsed.Index != 31 {
				t.Fatalf("report %+v", r)
			}
		})
	}
}
