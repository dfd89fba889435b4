package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/golang/snappy"
	bolt "go.etcd.io/bbolt"
)

// These tests damage snapshot files with bbolt directly, using the little
// of the snapshot format they need (see snapshot/format.go): bucket and
// meta key names, the chunk layout, and the two CRC-32C checksums.

var castagnoliTab = crc32.MakeTable(crc32.Castagnoli)

// damageSnapshot copies the fixture's newest snapshot to a temporary file,
// runs fn in a write transaction on it, then, if fixData, recomputes the
// data checksum, and if fixMeta, the meta checksum, so that fn's defect is
// the only one.
func damageSnapshot(t *testing.T, fn func(tx *bolt.Tx) error, fixData, fixMeta bool) string {
	t.Helper()
	b, err := os.ReadFile(fixSnapB)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(fixSnapB))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		meta := tx.Bucket([]byte("meta"))
		if fixData {
			crc := crc32.Update(0, castagnoliTab, tx.Bucket([]byte("workers")).Get([]byte("table")))
			c := tx.Bucket([]byte("places")).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				crc = crc32.Update(crc32.Update(crc, castagnoliTab, k), castagnoliTab, v)
			}
			if err := meta.Put([]byte("checksum"), binary.BigEndian.AppendUint32(nil, crc)); err != nil {
				return err
			}
		}
		if fixMeta {
			var crc uint32
			c := meta.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if string(k) != "meta_checksum" {
					crc = crc32.Update(crc32.Update(crc, castagnoliTab, k), castagnoliTab, v)
				}
			}
			return meta.Put([]byte("meta_checksum"), binary.BigEndian.AppendUint32(nil, crc))
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestInspectVerifyClean(t *testing.T) {
	for _, p := range []string{fixSnapA, fixSnapB} {
		out, _, err := runKvidx(t, "", "inspect", "verify", p)
		if err != nil || !strings.Contains(out, ": ok (") {
			t.Fatalf("verify %s: %v\n%s", p, err, out)
		}
	}
}

func TestInspectVerifyFindsDefects(t *testing.T) {
	tests := []struct {
		name             string
		fn               func(tx *bolt.Tx) error
		fixData, fixMeta bool
		want             string
	}{
		{"empty entry", func(tx *bolt.Tx) error {
			// Replace every chunk by one holding a single place without holders.
			if err := tx.DeleteBucket([]byte("places")); err != nil {
				return err
			}
			pb, err := tx.CreateBucket([]byte("places"))
			if err != nil {
				return err
			}
			var body []byte
			body = binary.AppendUvarint(body, 0) // position delta
			body = binary.AppendUvarint(body, 0) // no parent
			body = binary.LittleEndian.AppendUint64(body, 101)
			body = binary.LittleEndian.AppendUint64(body, 101)
			body = binary.AppendUvarint(body, 0) // no holder
			var v []byte
			for _, x := range []uint64{0, 1, 1, 0} { // last position, first ordinal, places, holder-blocks
				v = binary.AppendUvarint(v, x)
			}
			v = append(v, snappy.Encode(nil, body)...)
			return pb.Put(make([]byte, 8), v)
		}, true, true, "an empty entry"},
		{"count mismatch", func(tx *bolt.Tx) error {
			mb := tx.Bucket([]byte("meta"))
			n := binary.BigEndian.Uint64(mb.Get([]byte("entries")))
			return mb.Put([]byte("entries"), binary.BigEndian.AppendUint64(nil, n+1))
		}, false, true, "entries, meta says"},
		{"bad checksum", func(tx *bolt.Tx) error {
			pb := tx.Bucket([]byte("places"))
			k, v := pb.Cursor().First()
			v = bytes.Clone(v)
			v[len(v)-1] ^= 0x40
			return pb.Put(bytes.Clone(k), v)
		}, false, false, "data checksum mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := damageSnapshot(t, tt.fn, tt.fixData, tt.fixMeta)
			out, _, err := runKvidx(t, "", "inspect", "verify", path)
			var ee *exitError
			if err == nil || !asExit(err, &ee) || ee.code != 1 {
				t.Fatalf("verify: error %v, want exit status 1\n%s", err, out)
			}
			if !strings.Contains(out, tt.want) {
				t.Fatalf("findings do not mention %q:\n%s", tt.want, out)
			}
		})
	}
}

// A snapshot whose file name and meta disagree on the WAL index is a
// finding: a restart sets it aside as damaged. A copy under another name,
// not a snapshot name, is judged by its contents alone. Found by review.
func TestInspectVerifyNameAndMeta(t *testing.T) {
	data, err := os.ReadFile(fixSnapA) // WAL index 30
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"snapshot-00000000000000000031.bolt", false},
		{"snapshot-00000000000000000030.bolt", true},
		{"copy.bolt", true},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out, _, err := runKvidx(t, "", "inspect", "verify", path)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v\n%s", tc.name, err, out)
		case !tc.ok && (err == nil || !strings.Contains(out, "name says WAL index 31, its meta 30")):
			t.Errorf("%s: err %v, want a finding naming both indexes:\n%s", tc.name, err, out)
		}
	}
}

func asExit(err error, target **exitError) bool { return errors.As(err, target) }

// A directory or a FIFO given as a snapshot file is named as such by every
// command that opens one (snapshot.Open judged it by its size and called a
// directory a truncated snapshot).
func TestInspectNotASnapshotFile(t *testing.T) {
	base := t.TempDir()
	fifo := filepath.Join(base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"directory", base, "is a directory, not a snapshot file"},
		{"fifo", fifo, "is not a regular file"},
	}
	for _, tt := range tests {
		for _, args := range [][]string{
			{"inspect", "verify", tt.path},
			{"inspect", "entries", tt.path},
			{"inspect", "match", tt.path, "--local-hashes", "1"},
			{"inspect", "diff", tt.path, fixSnapA},
		} {
			t.Run(tt.name+"/"+args[1], func(t *testing.T) {
				out, _, err := runKvidx(t, "", args...)
				msg := out
				if err != nil {
					msg += err.Error()
				}
				if err == nil || !strings.Contains(msg, tt.path+": "+tt.want) || strings.Contains(msg, "truncated") {
					t.Fatalf("%v: %v\n%s", args, err, out)
				}
			})
		}
	}
}
