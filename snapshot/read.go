package snapshot

// Verification.
//
// bbolt checksums only its meta pages, so reading checks everything else:
// the file size against bbolt's page count (truncation), the pages of the
// buckets, read from the file before bbolt reads them (bbolt trusts their
// sizes and page ids; see checkPages), the format version,
// a complete meta with its own checksum, the hashing parameters, the worker
// table, every chunk's framing, order and counts, then the data checksum and
// the entry, holder-block and place counts; the engine's loader checks the
// places themselves. bbolt panics and memory faults on a damaged file are
// recovered. Every defect is an error matching [ErrCorrupt] that reads
// "snapshot <path>: <defect>", so recovery can fall back to an older
// snapshot.
//
// [Open] gives a [Reader] for inspection tools: meta, worker table, and
// [Reader.Scan] over a position range and a set of workers, which reads only
// the chunks that can hold such places (a scan of every position also checks
// the data checksum and the chunk, place and holder-block counts; the count
// of entries is checked by [Load] and [Reader.Verify]).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/kvidx/kvidx/engine"
)

// ErrCorrupt matches (with errors.Is) every error about a file that is not a
// sound snapshot: recovery falls back to an older one.
var ErrCorrupt = errors.New("corrupt snapshot")

// ErrIncompatible matches (with errors.Is), besides ErrCorrupt, the errors
// about a sound file that another kvidx build wrote and this one cannot
// read: a newer format version, another hash seed or sequence rule, its
// meta intact (its meta checksum holds). Recovery falls back to an older
// snapshot as for a damaged one, but leaves the file where it is.
var ErrIncompatible = errors.New("snapshot of another kvidx build")

type corruptError struct {
	path, defect string
	incompatible bool // a sound file of another build (ErrIncompatible)
}

func (e *corruptError) Error() string { return fmt.Sprintf("snapshot %s: %s", e.path, e.defect) }
func (e *corruptError) Is(target error) bool {
	return target == ErrCorrupt || e.incompatible && target == ErrIncompatible
}

func corrupt(path, format string, args ...any) error {
	return &corruptError{path: path, defect: fmt.Sprintf(format, args...)}
}

// Reader reads one snapshot file without loading it: its meta, its worker
// table, and places by position range. Open checks the meta and the worker
// table; only Load and Verify read (and check) all the data.
type Reader struct {
	path    string
	size    int64
	db      *bolt.DB
	meta    Meta
	workers []engine.WorkerKey
}

// Open opens a snapshot read-only and checks its meta and worker table.
func Open(path string) (*Reader, error) { return open(path, 0) }

// open is Open with extra flags for bbolt's memory map.
func open(path string, mmapFlags int) (r *Reader, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	// A wrong path, not a damaged snapshot: say so rather than judge its
	// size (a directory was reported as a truncated file).
	if fi.IsDir() {
		// A data directory is the likely mistake: name where its
		// snapshot files are.
		return nil, fmt.Errorf("snapshot %s: is a directory, not a snapshot file (a kvidx data directory keeps them in snapshots/, as snapshot-<WAL index>.bolt)", path)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("snapshot %s: is not a regular file (%s), not a snapshot file", path, fi.Mode().Type())
	}
	if sz := fi.Size(); sz < 4*minPageSize || sz%minPageSize != 0 || sz > math.MaxInt {
		return nil, corrupt(path, "file size %d is not a whole number of at least 4 pages of %d bytes (truncated?)", sz, minPageSize)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if r != nil {
				r.db.Close()
			}
			r, err = nil, corrupt(path, "unreadable (bbolt panicked: %v)", p)
		}
	}()
	db, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true, Timeout: time.Second, InitialMmapSize: int(fi.Size()), MmapFlags: mmapFlags})
	if err != nil {
		// An operating system's error, or a lock held too long, says nothing
		// of the file. Anything else is bbolt refusing the file: its own
		// errors (ErrInvalid, ErrChecksum, ErrVersionMismatch) or unexported
		// ones ("file size too small" for a file cut inside its second page).
		var errno syscall.Errno
		var pathErr *fs.PathError
		if errors.Is(err, berrors.ErrTimeout) || errors.As(err, &errno) || errors.As(err, &pathErr) {
			return nil, fmt.Errorf("snapshot %s: %w", path, err)
		}
		return nil, corrupt(path, "%v", err)
	}
	r = &Reader{path: path, db: db, size: fi.Size()}
	if err := db.View(r.readHead); err != nil {
		db.Close()
		return nil, err
	}
	return r, nil
}

// readHead reads and checks the meta bucket and the worker table.
func (r *Reader) readHead(tx *bolt.Tx) error {
	path := r.path
	if hwm := tx.Size(); hwm > r.size {
		return corrupt(path, "file of %d bytes, its pages reach %d (truncated)", r.size, hwm)
	}
	if err := r.checkPages(tx); err != nil {
		return err
	}
	mb := tx.Bucket(bucketMeta)
	if mb == nil {
		return corrupt(path, "no meta bucket")
	}
	get := func(k string, n int) ([]byte, error) {
		v := mb.Get([]byte(k))
		if v == nil {
			return nil, corrupt(path, "meta incomplete: no %s", k)
		}
		if n > 0 && len(v) != n {
			return nil, corrupt(path, "meta %s: %d bytes, want %d", k, len(v), n)
		}
		return v, nil
	}
	u64 := func(k string) (uint64, error) {
		v, err := get(k, 8)
		if err != nil {
			return 0, err
		}
		return binary.BigEndian.Uint64(v), nil
	}
	v, err := get(metaFormat, 4)
	if err != nil {
		return err
	}
	ver := binary.BigEndian.Uint32(v)
	if ver < minFormatVersion || ver > FormatVersion {
		err := &corruptError{path: path, defect: fmt.Sprintf("unknown format version %d (this build reads %d to %d)", ver, minFormatVersion, FormatVersion)}
		// A newer build's file whose meta checksum holds is not damaged
		// (a flipped version byte would fail the checksum).
		err.incompatible = ver > FormatVersion && metaChecksumHolds(mb)
		return err
	}
	for _, k := range []string{metaWALIndex, metaCreated, metaHashSeed, metaSeqRule, metaEntries, metaHolderBlocks,
		metaWorkerKeys, metaPlaces, metaChunks, metaCounters, metaSources, metaChecksum} {
		if _, err := get(k, 0); err != nil {
			return err
		}
	}
	if _, err := get(metaMetaChecksum, 4); err != nil {
		return err
	}
	if !metaChecksumHolds(mb) {
		return corrupt(path, "meta checksum mismatch")
	}
	m := &r.meta
	m.Version = int(ver)
	if m.Index, err = u64(metaWALIndex); err != nil {
		return err
	}
	created, err := u64(metaCreated)
	if err != nil {
		return err
	}
	m.Created = time.Unix(0, int64(created))
	seed, err := u64(metaHashSeed)
	if err != nil {
		return err
	}
	if seed != engine.Seed { // the meta checksum holds: another build's file
		return &corruptError{path: path, defect: fmt.Sprintf("hash seed %d, this build hashes with %d", seed, uint64(engine.Seed)), incompatible: true}
	}
	if v, err = get(metaSeqRule, 0); err != nil {
		return err
	}
	if string(v) != SeqRule { // the meta checksum holds: another build's file
		return &corruptError{path: path, defect: fmt.Sprintf("sequence rule %q, this build chains %q", v, SeqRule), incompatible: true}
	}
	var counts [5]uint64
	for i, k := range []string{metaEntries, metaHolderBlocks, metaWorkerKeys, metaPlaces, metaChunks} {
		if counts[i], err = u64(k); err != nil {
			return err
		}
		if counts[i] > math.MaxUint32 {
			return corrupt(path, "meta %s: %d out of range", k, counts[i])
		}
	}
	m.Stats.Entries, m.Stats.HolderBlocks, m.Stats.WorkerKeys = int(counts[0]), int(counts[1]), int(counts[2])
	m.Places, m.Chunks = int(counts[3]), int(counts[4])
	if v, err = get(metaCounters, 0); err != nil {
		return err
	}
	if err := json.Unmarshal(v, &m.Stats.Counters); err != nil {
		return corrupt(path, "meta counters: %v", err)
	}
	if v, err = get(metaSources, 0); err != nil {
		return err
	}
	if err := json.Unmarshal(v, &m.Sources); err != nil {
		return corrupt(path, "meta sources: %v", err)
	}
	if v, err = get(metaChecksum, 4); err != nil {
		return err
	}
	m.Checksum = binary.BigEndian.Uint32(v)

	wb := tx.Bucket(bucketWorkers)
	if wb == nil {
		return corrupt(path, "no workers bucket")
	}
	table := wb.Get(workersKey)
	if table == nil || len(table) != workerRecLen*m.Stats.WorkerKeys {
		return corrupt(path, "worker table of %d bytes, want %d worker keys", len(table), m.Stats.WorkerKeys)
	}
	r.workers = make([]engine.WorkerKey, m.Stats.WorkerKeys)
	for i := range r.workers {
		rec := table[workerRecLen*i:]
		r.workers[i] = engine.WorkerKey{WorkerID: binary.BigEndian.Uint64(rec), DPRank: binary.BigEndian.Uint32(rec[8:])}
		if i > 0 && !lessKey(r.workers[i-1], r.workers[i]) {
			return corrupt(path, "worker table not sorted")
		}
	}
	if tx.Bucket(bucketPlaces) == nil {
		return corrupt(path, "no places bucket")
	}
	return nil
}

// checkPages walks the pages of the root bucket and of the buckets it
// holds, reading them from the file rather than bbolt's map, before bbolt
// reads any of them. bbolt trusts the sizes, offsets and page ids a page
// holds: a damaged one made it allocate what a size declared (it copies an
// unaligned bucket value whole: up to 4 GiB for one flipped bit) or hand out
// keys and values that run past the file into memory of the Go heap (a
// checksum over such a key crashed the process with "found bad pointer in
// Go heap", which no recover catches). FuzzFile found both. Every page must
// lie within the file's pages, carry its own id, be a branch or a leaf page
// whose elements lie within it, and be reached once; an inline bucket's
// page must lie within its value. A page's overflow pages (a page of
// overflow n spans ids id to id+n) are its own: no element may name one and
// no other page's run may cover one. Otherwise a page header forged in a
// value's bytes (a chunk's data can hold anything) would be read as a page
// of its own, and two overlapping runs would have bbolt read the same bytes
// as two pages, which the checks of each page alone do not see.
func (r *Reader) checkPages(tx *bolt.Tx) error {
	f, err := os.Open(r.path)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", r.path, err)
	}
	defer f.Close()
	ps := int64(tx.DB().Info().PageSize)
	pages := tx.Size() / ps
	w := &pageWalker{r: r, f: f, ps: ps, end: tx.Size(), seen: newBitset(pages), heads: newBitset(pages)}
	var buckets [][]byte
	if err := w.walk(int64(tx.Cursor().Bucket().Root()), 0, &buckets); err != nil {
		return err
	}
	for _, v := range buckets {
		if len(v) < bucketHeader {
			return corrupt(r.path, "bucket value of %d bytes", len(v))
		}
		if root := int64(binary.LittleEndian.Uint64(v)); root != 0 {
			if err := w.walk(root, 0, nil); err != nil {
				return err
			}
			continue
		}
		// An inline bucket: a leaf page within the value.
		page := v[bucketHeader:]
		if len(page) < pageHeader {
			return corrupt(r.path, "inline bucket of %d bytes", len(v))
		}
		if flags := binary.LittleEndian.Uint16(page[8:]); flags != leafPage {
			return corrupt(r.path, "inline bucket page is not a leaf page (flags %#x)", flags)
		}
		count := int64(binary.LittleEndian.Uint16(page[10:]))
		size := int64(len(page))
		if pageHeader+elementSize*count > size {
			return corrupt(r.path, "inline bucket page: %d elements do not fit in its %d bytes", count, size)
		}
		if err := w.leafElements(page[pageHeader:pageHeader+elementSize*count], size, "an inline bucket page"); err != nil {
			return err
		}
	}
	return nil
}

// bbolt's page layout (go.etcd.io/bbolt/internal/common/page.go).
const (
	pageHeader   = 16 // id, flags, count, overflow
	elementSize  = 16 // leaf: flags, pos, ksize, vsize; branch: pos, ksize, pgid
	bucketHeader = 16 // root page id, sequence
	branchPage   = 0x01
	leafPage     = 0x02
	bucketLeaf   = 0x01 // a leaf element that is a bucket
	maxDepth     = 64
)

// pageWalker reads bbolt pages from the file for checkPages.
type pageWalker struct {
	r   *Reader
	f   *os.File
	ps  int64
	end int64 // bytes the meta's page count covers (at most the file's size)
	// Bitsets over the file's pages, not maps: the walk runs on every Open
	// of files of hundreds of MB.
	seen  bitset // every page of the runs walked: a page and its overflow pages
	heads bitset // the first page of each run, to tell "reached twice" apart
}

// bitset is a set of page ids below a bound fixed when it is made.
type bitset []uint64

func newBitset(n int64) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) has(i int64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i int64)      { b[i/64] |= 1 << (i % 64) }

// walk checks page id and the pages under it; buckets, when not nil,
// collects the values of the bucket elements of its leaves (the root
// bucket's: kvidx's three buckets).
func (w *pageWalker) walk(id int64, depth int, buckets *[][]byte) error {
	path := w.r.path
	if depth > maxDepth {
		return corrupt(path, "page %d: a tree deeper than %d pages", id, maxDepth)
	}
	if id < 2 || id >= w.end/w.ps {
		return corrupt(path, "page %d beyond the file's %d pages", id, w.end/w.ps)
	}
	if w.heads.has(id) {
		return corrupt(path, "page %d reached twice", id)
	}
	if w.seen.has(id) {
		return corrupt(path, "page %d lies within another page's overflow pages", id)
	}
	w.seen.set(id)
	w.heads.set(id)
	head := make([]byte, pageHeader)
	if _, err := w.f.ReadAt(head, id*w.ps); err != nil {
		return fmt.Errorf("snapshot %s: reading page %d: %w", path, id, err)
	}
	flags, count := binary.LittleEndian.Uint16(head[8:]), int64(binary.LittleEndian.Uint16(head[10:]))
	size := (1 + int64(binary.LittleEndian.Uint32(head[12:]))) * w.ps
	switch {
	case int64(binary.LittleEndian.Uint64(head)) != id:
		return corrupt(path, "page %d carries the id %d", id, binary.LittleEndian.Uint64(head))
	case flags != leafPage && flags != branchPage:
		return corrupt(path, "page %d is neither a branch nor a leaf page (flags %#x)", id, flags)
	case size > w.end-id*w.ps:
		return corrupt(path, "page %d of %d bytes reaches past the file's pages", id, size)
	case pageHeader+elementSize*count > size:
		return corrupt(path, "page %d: %d elements do not fit in its %d bytes", id, count, size)
	}
	// The run lies within the file's pages (checked above). A page of the
	// run walked before is caught here, one walked after by the checks
	// above when it is reached.
	for o := id + 1; o < id+size/w.ps; o++ {
		if w.seen.has(o) {
			return corrupt(path, "page %d of %d bytes overlaps page %d", id, size, o)
		}
		w.seen.set(o)
	}
	elems := make([]byte, elementSize*count)
	if _, err := w.f.ReadAt(elems, id*w.ps+pageHeader); err != nil {
		return fmt.Errorf("snapshot %s: reading page %d: %w", path, id, err)
	}
	if flags == branchPage {
		for i := range count {
			e := elems[elementSize*i:]
			if end := pageHeader + elementSize*i + int64(binary.LittleEndian.Uint32(e)) + int64(binary.LittleEndian.Uint32(e[4:])); end > size {
				return corrupt(path, "page %d: element %d reaches byte %d of a %d-byte page", id, i, end, size)
			}
			if err := w.walk(int64(binary.LittleEndian.Uint64(e[8:])), depth+1, buckets); err != nil {
				return err
			}
		}
		return nil
	}
	if err := w.leafElements(elems, size, fmt.Sprintf("page %d", id)); err != nil {
		return err
	}
	if buckets == nil {
		return nil
	}
	for i := range count {
		e := elems[elementSize*i:]
		if binary.LittleEndian.Uint32(e)&bucketLeaf == 0 {
			continue
		}
		if len(*buckets) == 16 {
			return corrupt(path, "the root bucket holds more than 16 buckets")
		}
		vsize := int64(binary.LittleEndian.Uint32(e[12:]))
		// bbolt inlines a bucket smaller than a quarter page.
		if vsize > w.ps {
			return corrupt(path, "page %d: bucket value of %d bytes", id, vsize)
		}
		v := make([]byte, vsize)
		off := id*w.ps + pageHeader + elementSize*i + int64(binary.LittleEndian.Uint32(e[4:])) + int64(binary.LittleEndian.Uint32(e[8:]))
		if _, err := w.f.ReadAt(v, off); err != nil {
			return fmt.Errorf("snapshot %s: reading page %d: %w", path, id, err)
		}
		*buckets = append(*buckets, v)
	}
	return nil
}

// leafElements checks that each leaf element of a page of size bytes
// (elems: its element array) lies within it.
func (w *pageWalker) leafElements(elems []byte, size int64, what string) error {
	for i := range int64(len(elems) / elementSize) {
		e := elems[elementSize*i:]
		end := pageHeader + elementSize*i + int64(binary.LittleEndian.Uint32(e[4:])) +
			int64(binary.LittleEndian.Uint32(e[8:])) + int64(binary.LittleEndian.Uint32(e[12:]))
		if end > size {
			return corrupt(w.r.path, "%s: element %d reaches byte %d of a %d-byte page", what, i, end, size)
		}
	}
	return nil
}

// metaChecksumHolds reports whether the meta bucket's meta checksum key
// holds the CRC-32C of every other key and value, in key order.
func metaChecksumHolds(mb *bolt.Bucket) bool {
	want := mb.Get([]byte(metaMetaChecksum))
	if len(want) != 4 {
		return false
	}
	var mcrc uint32
	c := mb.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if string(k) != metaMetaChecksum {
			mcrc = checksumUpdate(checksumUpdate(mcrc, k), v)
		}
	}
	return mcrc == binary.BigEndian.Uint32(want)
}

func lessKey(a, b engine.WorkerKey) bool {
	return a.WorkerID < b.WorkerID || a.WorkerID == b.WorkerID && a.DPRank < b.DPRank
}

// Path returns the file's path.
func (r *Reader) Path() string { return r.path }

// Meta returns the snapshot's meta.
func (r *Reader) Meta() Meta { return r.meta }

// Workers returns the worker-key table (worker index -> key), sorted.
func (r *Reader) Workers() []engine.WorkerKey { return r.workers }

// Close closes the file.
func (r *Reader) Close() error { return r.db.Close() }

// Scan calls yield for every place with from <= Position <= to, in file
// order, reading only the chunks that can hold such places. When workers is
// not empty, only places held by one of them are yielded, with Holders
// trimmed to them. A record's ID is the place's ordinal in the file and its
// Parent the parent's ordinal (0: none). The record is reused between calls.
// Scan checks each chunk it reads. A scan of every position (from 0 to
// math.MaxUint32) reads every chunk, so it also checks the data checksum
// and the meta's counts of chunks, places and holder-blocks, once every
// place is yielded: a flipped byte that still decodes, or a meta that
// miscounts the data, is then an error at the end rather than a wrong
// answer (see Verify for the rest: chunk order and the count of entries).
func (r *Reader) Scan(ctx context.Context, from, to uint32, workers []engine.WorkerKey, yield func(*engine.PlaceRecord) bool) error {
	if from > to {
		return nil
	}
	d := &decoder{version: uint32(r.meta.Version), workers: r.workers}
	var out engine.PlaceBatch
	var rec engine.PlaceRecord
	if len(workers) > 0 {
		d.sel = make([]bool, len(r.workers))
		for _, w := range workers {
			for i, k := range r.workers {
				if k == w {
					d.sel[i] = true
				}
			}
		}
	}
	full := from == 0 && to == math.MaxUint32
	return r.view(func(tx *bolt.Tx) error {
		var crc uint32
		if full {
			crc = checksumUpdate(0, tx.Bucket(bucketWorkers).Get(workersKey))
		}
		c := tx.Bucket(bucketPlaces).Cursor()
		// The first chunk at or after from, or an earlier one still reaching it.
		start, _ := c.Seek(chunkKey(from, 0))
		var pk, pv []byte
		if start == nil {
			pk, pv = c.Last()
		} else {
			pk, pv = c.Prev()
		}
		for pk != nil {
			h, err := parseChunkHeader(pv)
			if err != nil {
				return corrupt(r.path, "chunk %s: %v", keyText(pk), err)
			}
			if h.lastPos < from {
				break
			}
			start = pk
			pk, pv = c.Prev()
		}
		if start == nil && !full {
			return nil
		}
		// A full scan of a file without chunks still checks the meta.
		chunks := 0
		k, v := c.Seek(start)
		for ; k != nil; k, v = c.Next() {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("snapshot %s: %w", r.path, err)
			}
			if first, _, err := parseChunkKey(k); err == nil && first > to {
				break
			}
			if full {
				crc = checksumUpdate(checksumUpdate(crc, k), v)
				chunks++
			}
			d.hasPrev, d.nextOrd = false, 0 // chunks are checked one by one
			out.Reset()
			if err := d.chunk(k, v, from, to, &out); err != nil {
				return corrupt(r.path, "chunk %s: %v", keyText(k), err)
			}
			h0, x0 := uint32(0), uint32(0)
			for _, p := range out.Places {
				rec = engine.PlaceRecord{ID: p.ID, Parent: p.Parent, Position: p.Position, TokensHash: p.TokensHash, Seq: p.Seq, Holders: rec.Holders[:0]}
				for _, h := range out.Holders[h0:p.HoldersEnd] {
					rec.Holders = append(rec.Holders, engine.HolderRecord{Worker: out.Workers[h.Worker], BlockHashes: out.Hashes[x0:h.HashesEnd:h.HashesEnd]})
					x0 = h.HashesEnd
				}
				h0 = p.HoldersEnd
				if !yield(&rec) {
					return nil
				}
			}
		}
		if !full {
			return nil
		}
		m := r.meta
		switch {
		case crc != m.Checksum:
			return corrupt(r.path, "data checksum mismatch")
		case chunks != m.Chunks:
			return corrupt(r.path, "%d chunks, meta says %d", chunks, m.Chunks)
		case d.places != m.Places:
			return corrupt(r.path, "%d places, meta says %d", d.places, m.Places)
		case d.hbs != m.Stats.HolderBlocks:
			return corrupt(r.path, "%d holder-blocks, meta says %d", d.hbs, m.Stats.HolderBlocks)
		}
		return nil
	})
}

// view runs fn in a read transaction, turning a bbolt panic (a damaged
// file) into an error.
func (r *Reader) view(fn func(*bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = corrupt(r.path, "unreadable (bbolt panicked: %v)", p)
		}
	}()
	return r.db.View(fn)
}

// each decodes every chunk in order, checking the whole file: chunk order
// and sequence, the data checksum and the meta's counts. fn gets each
// chunk's places in a batch it then owns, and returns an empty batch for the
// next chunk (the same one, reset, when it keeps nothing).
func (r *Reader) each(ctx context.Context, countEntries bool, fn func(*engine.PlaceBatch) (*engine.PlaceBatch, error)) error {
	d := &decoder{version: uint32(r.meta.Version), workers: r.workers, nextOrd: 1, countEntries: countEntries}
	out := &engine.PlaceBatch{}
	err := r.view(func(tx *bolt.Tx) error {
		crc := checksumUpdate(0, tx.Bucket(bucketWorkers).Get(workersKey))
		c := tx.Bucket(bucketPlaces).Cursor()
		var seq uint32
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if seq&15 == 0 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("snapshot %s: %w", r.path, err)
				}
			}
			if v == nil {
				return corrupt(r.path, "places bucket holds a nested bucket %s", keyText(k))
			}
			crc = checksumUpdate(checksumUpdate(crc, k), v)
			_, s, err := parseChunkKey(k)
			if err != nil {
				return corrupt(r.path, "%v", err)
			}
			if s != seq {
				return corrupt(r.path, "chunk %x: sequence number %d, want %d", k, s, seq)
			}
			seq++
			if err := d.chunk(k, v, 0, math.MaxUint32, out); err != nil {
				return corrupt(r.path, "chunk %x: %v", k, err)
			}
			if out, err = fn(out); err != nil {
				return err
			}
		}
		m := r.meta
		if crc != m.Checksum {
			return corrupt(r.path, "data checksum mismatch")
		}
		switch {
		case int(seq) != m.Chunks:
			return corrupt(r.path, "%d chunks, meta says %d", seq, m.Chunks)
		case d.places != m.Places:
			return corrupt(r.path, "%d places, meta says %d", d.places, m.Places)
		case countEntries && d.entries.total() != m.Stats.Entries:
			return corrupt(r.path, "%d entries, meta says %d", d.entries.total(), m.Stats.Entries)
		case d.hbs != m.Stats.HolderBlocks:
			return corrupt(r.path, "%d holder-blocks, meta says %d", d.hbs, m.Stats.HolderBlocks)
		}
		return nil
	})
	return err
}

// Verify reads the whole file and checks it as Load does, without building
// an index (worker keys holding no block are caught by Load only).
func (r *Reader) Verify(ctx context.Context) error { return r.VerifyWith(ctx, nil) }

// VerifyWith is Verify calling progress, when set, after each chunk with
// the places checked so far and the meta's count of places (as
// LoadOptions.Progress).
func (r *Reader) VerifyWith(ctx context.Context, progress func(done, total int)) error {
	done := 0
	return r.each(ctx, true, func(b *engine.PlaceBatch) (*engine.PlaceBatch, error) {
		if progress != nil {
			done += len(b.Places)
			progress(done, r.meta.Places)
		}
		b.Reset()
		return b, nil
	})
}

// errLoadFailed stops decoding once the loader has failed (its error is
// the one reported).
var errLoadFailed = errors.New("load failed")

// Load reads the snapshot at path into a new index and returns it with the
// snapshot's meta. Any defect of the file is an error matching ErrCorrupt
// that names the file and the defect.
func Load(ctx context.Context, path string) (*engine.Index, Meta, error) {
	return LoadWith(ctx, path, LoadOptions{})
}

// LoadOptions are Load's options; the zero value is Load.
type LoadOptions struct {
	// Progress, when set, is called after each chunk is decoded, on the
	// goroutine that called LoadWith, with the places decoded so far and
	// the meta's count of places (total). Chunks come every few thousand
	// places: a caller that reports to people limits the rate itself.
	Progress func(done, total int)
}

// LoadWith is Load with options.
func LoadWith(ctx context.Context, path string, opts LoadOptions) (*engine.Index, Meta, error) {
	r, err := open(path, populate)
	if err != nil {
		return nil, Meta{}, err
	}
	defer r.Close()
	// The meta's counts size the loader; a file cannot hold more places or
	// block hashes than it has bytes, whatever a damaged meta says.
	var size int
	if fi, err := os.Stat(path); err == nil {
		size = int(fi.Size())
	}
	l := engine.NewLoader(engine.LoaderHint{
		Places:       min(r.meta.Places, size),
		HolderBlocks: min(r.meta.Stats.HolderBlocks, size),
		WorkerKeys:   min(r.meta.Stats.WorkerKeys, size),
	})
	defer l.Close()
	// Decoding and loading overlap: this goroutine decodes each chunk into
	// a batch and another hands the batch to the engine's loader, which
	// fetches the batch's parents together.
	batches, free := make(chan *engine.PlaceBatch, 2), make(chan *engine.PlaceBatch, 3)
	for range cap(free) - 1 {
		free <- &engine.PlaceBatch{}
	}
	var failed atomic.Bool
	loaded := make(chan error, 1)
	go func() {
		var lerr error
		defer func() {
			if p := recover(); p != nil {
				lerr = corrupt(path, "loading: %v", p)
				failed.Store(true)
				for b := range batches {
					b.Reset()
					free <- b
				}
			}
			loaded <- lerr
		}()
		for b := range batches {
			if lerr == nil {
				if err := l.AddPlaces(b); err != nil {
					lerr = corrupt(path, "%v", err)
					failed.Store(true)
				}
			}
			b.Reset()
			free <- b
		}
	}()
	// The loaded index counts entries itself; they are compared with the
	// meta below.
	decoded := 0
	err = r.each(ctx, false, func(b *engine.PlaceBatch) (*engine.PlaceBatch, error) {
		if failed.Load() {
			return nil, errLoadFailed
		}
		if opts.Progress != nil {
			decoded += len(b.Places)
			opts.Progress(decoded, r.meta.Places)
		}
		batches <- b
		return <-free, nil
	})
	close(batches)
	if lerr := <-loaded; lerr != nil {
		return nil, Meta{}, lerr
	}
	if err != nil {
		return nil, Meta{}, err
	}
	ix, err := l.Finish(r.meta.Stats.Counters)
	if err != nil {
		return nil, Meta{}, corrupt(path, "%v", err)
	}
	if st := ix.Stats(); st != r.meta.Stats {
		return nil, Meta{}, corrupt(path, "loaded %d entries, %d holder-blocks, %d worker keys; meta says %d, %d, %d",
			st.Entries, st.HolderBlocks, st.WorkerKeys, r.meta.Stats.Entries, r.meta.Stats.HolderBlocks, r.meta.Stats.WorkerKeys)
	}
	return ix, r.meta, nil
}
