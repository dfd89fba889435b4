package recovery

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvidx/kvidx/snapshot"
)

// setSnapMeta rewrites one meta value of a snapshot and its meta checksum:
// a sound file that another kvidx build wrote, not a damaged one.
func setSnapMeta(t *testing.T, path, key string, val []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o640, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		mb := tx.Bucket([]byte("meta"))
		if err := mb.Put([]byte(key), val); err != nil {
			return err
		}
		tab := crc32.MakeTable(crc32.Castagnoli)
		var crc uint32
		c := mb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if string(k) != "meta_checksum" {
				crc = crc32.Update(crc32.Update(crc, tab, k), tab, v)
			}
		}
		return mb.Put([]byte("meta_checksum"), binary.BigEndian.AppendUint32(nil, crc))
	})
	if err != nil {
		t.Fatal(err)
	}
}

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
			setSnapMeta(t, newer, c.key, c.val)

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
