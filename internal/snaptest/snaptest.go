package snaptest

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// SetMeta rewrites one value of the snapshot's meta bucket and then its meta
// checksum (CRC-32C over every other meta key and value, in key order), so
// that the file stays sound.
func SetMeta(t testing.TB, path, key string, val []byte) {
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
