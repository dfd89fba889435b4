package snapshot

// Publishing.
//
// [Write] writes a temporary file .snapshot-<N>.tmp-<random> in the target
// directory with bbolt's syncs off and pages filled to 100%, batches of
// chunks per transaction, then syncs the data once, closes, fsyncs the file,
// renames it to its final name and fsyncs the directory. A crash at any
// moment leaves the published set as it was and at most a temporary file,
// which [CleanTemp] removes (at startup; [TempFiles] lists them, read
// only). [Prune] keeps the newest K snapshots; call it after a new one is
// published. [List] returns the snapshots newest first.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kvidx/kvidx/engine"
)

// Source is one input's position at the snapshot's cut: opaque to this
// package (the WAL layer names its sources and sequence numbers).
type Source struct {
	Name string `json:"name"`
	Seq  uint64 `json:"seq"`
}

// Meta describes a snapshot. Write takes Index, Sources and Created (zero:
// now); Load and Open return all of it, as stored in the file.
type Meta struct {
	// Index is the WAL index N the snapshot's state is as of.
	Index   uint64
	Sources []Source
	Created time.Time

	// Filled from the file.
	Version  int
	Stats    engine.Stats // entries, holder-blocks, worker keys, counters
	Places   int
	Chunks   int
	Checksum uint32 // CRC-32C of the data
}

// Option changes how Write writes.
type Option func(*options)

type options struct {
	chunkBytes int
	txBytes    int
}

func defaultOptions() options {
	return options{chunkBytes: defaultChunkBytes, txBytes: 4 << 20}
}

// WithChunkBytes sets the uncompressed size at which a chunk of places is
// closed (default 31 KiB, see pageSize).
func WithChunkBytes(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.chunkBytes = n
		}
	}
}

// withTxBytes sets the values per bbolt transaction (default 4 MiB: the
// smaller the transaction, the less new memory its arena and bbolt's
// buffers take); tests
// make it small to exercise many commits and values that do not fit the
// transaction's arena.
func withTxBytes(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.txBytes = n
		}
	}
}

// Write writes the frozen state f as the snapshot of WAL index meta.Index
// into dir, publishing it atomically as snapshot-<20-digit index>.bolt (an
// existing snapshot of the same index is replaced), and returns its path. On
// error, and on cancellation of ctx, nothing is published and the temporary
// file is removed.
func Write(ctx context.Context, dir string, f *engine.Frozen, meta Meta, opts ...Option) (path string, err error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	final := filepath.Join(dir, FileName(meta.Index))
	if err := checkTarget(final); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, fmt.Sprintf(".snapshot-%020d.tmp-*", meta.Index))
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", final, err)
	}
	tmpPath := tmp.Name()
	if err := tmp.Close(); err != nil {
		os.Remove(tmpPath)
		return "", fmt.Errorf("snapshot %s: %w", final, err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmpPath)
		}
	}()
	if err := writeFile(ctx, tmpPath, f, meta, o); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", final, err)
	}
	if err := syncFile(tmpPath); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", final, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", final, err)
	}
	if err := os.Rename(tmpPath, final); err != nil {
		if err := checkTarget(final); err != nil {
			return "", err
		}
		return "", fmt.Errorf("snapshot %s: %w", final, err)
	}
	if err := syncDir(dir); err != nil {
		return final, fmt.Errorf("snapshot %s: published, but syncing its directory: %w", final, err)
	}
	return final, nil
}

// checkTarget refuses a directory at final, the path Write publishes its
// snapshot as: the rename over it would fail only once the whole file is
// written, and with no word of what to do.
func checkTarget(final string) error {
	fi, err := os.Lstat(final)
	if err != nil || !fi.IsDir() {
		return nil
	}
	return fmt.Errorf("snapshot %s: %w: a directory has the snapshot's name (kvidx never makes one there); move it out of %s and try again",
		final, fs.ErrExist, filepath.Dir(final))
}

func writeFile(ctx context.Context, path string, f *engine.Frozen, meta Meta, o options) error {
	// A collection first: the frozen copy just made has grown the heap
	// towards the collector's goal, and a cycle that started during the
	// write would mark the whole live index while both of its goroutines
	// work (a 10M holder-block first write without it ran at 4.7M holder-blocks/s;
	// with it, 5.1-10.1M over twelve runs). It takes about 40 ms at 10M.
	runtime.GC()
	st := f.Stats()
	db, err := bolt.Open(path, 0o644, &bolt.Options{
		Timeout:         time.Second,
		NoSync:          true,
		NoFreelistSync:  true,
		NoGrowSync:      true,
		PageSize:        pageSize,
		InitialMmapSize: 1<<20 + 16*st.HolderBlocks,
	})
	if err != nil {
		return err
	}
	defer db.Close()

	// The worker table, in the frozen (sorted) order.
	ws := f.Workers()
	table := make([]byte, 0, workerRecLen*len(ws))
	index := make(map[engine.WorkerKey]uint32, len(ws))
	for i, w := range ws {
		table = binary.BigEndian.AppendUint64(table, w.Worker.WorkerID)
		table = binary.BigEndian.AppendUint32(table, w.Worker.DPRank)
		index[w.Worker] = uint32(i)
	}
	crc := checksumUpdate(0, table)
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketWorkers, bucketPlaces} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		b := tx.Bucket(bucketWorkers)
		b.FillPercent = 1.0
		return b.Put(workersKey, table)
	}); err != nil {
		return err
	}

	// Chunk values (encoded and compressed here) go to a writer goroutine
	// that puts them in batches of about txBytes per transaction; their
	// buffers come back through free. Compressing here rather than there
	// balances the two: the writer's share (bbolt copying values into
	// pages, and the file writes) is the larger. The writer also counts the
	// entries, from each chunk's (position, tokens hash) keys: that count
	// took a fifth of this goroutine's time, while the writer's was mostly
	// idle.
	//
	// The queue holds a transaction's worth of chunks and then some: while
	// the writer commits (bbolt copying the values into pages and writing
	// them, about 25 ms for 4 MiB here), this goroutine keeps encoding.
	// With a queue of 4 it stopped after 4 chunks and the two goroutines
	// took turns: a 10M holder-block write took 1.9-2.6 s instead of
	// 1.2-1.6 s. At most about 10 MiB of chunks are in flight.
	var entries entryCounter // the writer's until werr
	queued := o.txBytes/o.chunkBytes + 32
	chunks := make(chan chunkOut, queued)
	free := make(chan chunkOut, queued+4)
	werr := make(chan error, 1)
	// The disk writes the committed pages while the rest is encoded, so the
	// final fsync waits for little more than the last transaction.
	wb := openWriteback(path)
	if wb != nil {
		defer wb.Close()
	}
	go func() {
		var err error
		var tx *bolt.Tx
		var b *bolt.Bucket
		batch := 0
		// A transaction's values are carved from one arena, reused after
		// each commit: fresh memory is slow to fault in, and 20 bytes a
		// holder-block of short-lived values would also feed the collector.
		// bbolt keeps the values it is given until the commit.
		arena := make([]byte, 0, o.txBytes+2*o.chunkBytes)
		for c := range chunks {
			if err != nil {
				continue // drain
			}
			k := c.key
			v := c.value
			if cap(arena)-len(arena) >= len(v) {
				arena = append(arena, v...)
				v = arena[len(arena)-len(v) : len(arena) : len(arena)]
			} else {
				v = bytes.Clone(v)
			}
			for _, e := range c.entries {
				entries.add(e.pos, e.th)
			}
			c.entries = c.entries[:0]
			select {
			case free <- c:
			default:
			}
			crc = checksumUpdate(checksumUpdate(crc, k), v)
			if tx == nil {
				if tx, err = db.Begin(true); err != nil {
					continue
				}
				b = tx.Bucket(bucketPlaces)
				b.FillPercent = 1.0
			}
			if err = b.Put(k, v); err != nil {
				continue
			}
			batch += len(v)
			if batch >= o.txBytes {
				err = tx.Commit()
				tx, batch, arena = nil, 0, arena[:0]
				if wb != nil {
					startWriteback(wb)
				}
			}
		}
		if tx != nil {
			if err == nil {
				err = tx.Commit()
			} else {
				tx.Rollback()
			}
		}
		werr <- err
	}()

	var (
		enc     encoder
		seqNo   uint32
		ord     uint64
		places  int
		hbs     int
		prevPos uint32
		failed  error
	)
	// Places names each holder's index in the frozen worker table, which is
	// the file's; the map is the fallback for records made otherwise.
	widx := func(h *engine.HolderRecord) (uint32, bool) {
		if int(h.WorkerIndex) < len(ws) && ws[h.WorkerIndex].Worker == h.Worker {
			return h.WorkerIndex, true
		}
		i, ok := index[h.Worker]
		return i, ok
	}
	var out chunkOut
	stored := 0 // chunks still to store uncompressed (see storeRun)
	flush := func() {
		enc.seq = seqNo
		out.key = chunkKey(enc.firstPos, enc.seq)
		out.value = enc.appendValue(out.value[:0], stored > 0)
		switch {
		case stored > 0:
			stored--
		case len(out.value) > len(enc.body)-len(enc.body)/20:
			stored = storeRun
		}
		chunks <- out
		seqNo++
		select {
		case out = <-free:
		default:
			out = chunkOut{}
		}
		enc.reset(ord + 1)
	}
	enc.reset(1)
	f.Places(func(rec *engine.PlaceRecord) bool {
		ord++
		if ord&1023 == 0 {
			if failed = ctx.Err(); failed != nil {
				return false
			}
		}
		if places > 0 && rec.Position < prevPos {
			failed = fmt.Errorf("frozen places out of position order at position %d", rec.Position)
			return false
		}
		prevPos = rec.Position
		out.entries = append(out.entries, entryKey{rec.Position, rec.TokensHash})
		places++
		// IDs are ordinals from 1; a parent comes before its child.
		if uint64(rec.ID) != ord || rec.Parent >= rec.ID {
			failed = fmt.Errorf("frozen place %d (parent %d) is place %d of the order", rec.ID, rec.Parent, ord)
			return false
		}
		parentOrd := uint64(rec.Parent)
		before := enc.hbs
		if failed = enc.add(rec, ord, parentOrd, widx); failed != nil {
			return false
		}
		hbs += enc.hbs - before
		if len(enc.body) >= o.chunkBytes {
			flush()
		}
		return true
	})
	if failed == nil && enc.places > 0 {
		flush()
	}
	close(chunks)
	if err := <-werr; err != nil { // crc is final from here on
		return err
	}
	if failed != nil {
		return failed
	}
	// The places must give the index's own counts: a file whose meta
	// disagreed with its data would be rejected by Load, after older
	// snapshots had been pruned for it.
	if entries.total() != st.Entries || hbs != st.HolderBlocks || len(ws) != st.WorkerKeys {
		return fmt.Errorf("frozen places give %d entries, %d holder-blocks, %d worker keys; its stats say %d, %d, %d",
			entries.total(), hbs, len(ws), st.Entries, st.HolderBlocks, st.WorkerKeys)
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	counters, err := json.Marshal(st.Counters)
	if err != nil {
		return err
	}
	sources := meta.Sources
	if sources == nil {
		sources = []Source{}
	}
	srcJSON, err := json.Marshal(sources)
	if err != nil {
		return err
	}
	created := meta.Created
	if created.IsZero() {
		created = time.Now()
	}
	u32 := func(x uint32) []byte { return binary.BigEndian.AppendUint32(nil, x) }
	u64 := func(x uint64) []byte { return binary.BigEndian.AppendUint64(nil, x) }
	kvs := []struct {
		k string
		v []byte
	}{
		{metaChecksum, u32(crc)},
		{metaChunks, u64(uint64(seqNo))},
		{metaCounters, counters},
		{metaCreated, u64(uint64(created.UnixNano()))},
		{metaEntries, u64(uint64(entries.total()))},
		{metaFormat, u32(FormatVersion)},
		{metaHashSeed, u64(engine.Seed)},
		{metaHolderBlocks, u64(uint64(hbs))},
		{metaPlaces, u64(uint64(places))},
		{metaSeqRule, []byte(SeqRule)},
		{metaSources, srcJSON},
		{metaWALIndex, u64(meta.Index)},
		{metaWorkerKeys, u64(uint64(len(ws)))},
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		b.FillPercent = 1.0
		var mcrc uint32
		for _, kv := range kvs { // sorted by key
			if err := b.Put([]byte(kv.k), kv.v); err != nil {
				return err
			}
			mcrc = checksumUpdate(checksumUpdate(mcrc, []byte(kv.k)), kv.v)
		}
		return b.Put([]byte(metaMetaChecksum), u32(mcrc))
	}); err != nil {
		return err
	}
	if err := db.Sync(); err != nil {
		return err
	}
	return db.Close()
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, os.ErrInvalid) { // directories that cannot be synced
		return nil
	}
	return err
}
