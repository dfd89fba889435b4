package snapshot

// File layout.
//
// One bbolt file, snapshot-<N as 20 digits>.bolt, page size 64 KiB (4 KiB in
// files written before: bbolt reads the size from the file), with three
// buckets:
//
//   - meta: format version, WAL index N, creation time, hashing parameters
//     (seed 1337 and the sequence-chain rule), the counts of entries,
//     holder-blocks, worker keys, places and chunks, the engine counters
//     (JSON), the source positions (JSON, opaque here), a CRC-32C of the
//     data, and a CRC-32C of the other meta keys and values.
//   - workers: the worker-key table, worker index -> key, sorted, 12 bytes a key.
//   - places: chunks of about 31 KiB of places (uncompressed), each one value
//     under the key (first position, chunk number), both big-endian uint32,
//     so keys are in position order. A value is a small header (last
//     position, ordinal of the first place, place and holder-block counts)
//     and a snappy block of compactly encoded places: position deltas,
//     parent as an ordinal distance, tokens hash and seq, holders as
//     worker-index deltas, block hashes raw, except a holder's first when
//     it equals the place's seq, as Dynamo's engines name blocks (format
//     version 2; see chunkHeader). A chunk that snappy would hardly shrink
//     (random block hashes) is stored as a snappy block of one literal.
//     Places are numbered 1, 2, ... in file order; the IDs are not stored.
//     Files of format version 1 (no such omission) are read too.
//
// The data checksum covers the worker table and every chunk key and value
// in order.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"

	"github.com/golang/snappy"

	"github.com/kvidx/kvidx/engine"
)

// FormatVersion is the version of the file layout this package writes. It
// reads it and every earlier one (see minFormatVersion).
//
// Version 2 (kvidx's fourth session) omits a holder's first block hash when
// it equals the place's router seq, which is what Dynamo's engines send:
// snappy used to find those 8 bytes again, at a tenth of a write's time.
// Version 1 has no such flag.
const FormatVersion = 2

// minFormatVersion is the oldest version this package reads.
const minFormatVersion = 1

// SeqRule names the router sequence chain the engine computes (see
// [engine.NextSeq]). A file written under another rule is rejected.
const SeqRule = "xxh3-64(seed=1337, le64(parent_seq) || le64(tokens_hash)); first seq = tokens_hash"

// pageSize is the bbolt page size a snapshot is written with, and
// defaultChunkBytes the size at which a chunk is closed: two chunk values to
// a page. bbolt puts at least two values on a leaf, and writes a leaf that
// spans several pages from a buffer it allocates for that leaf on every
// commit, but a one-page leaf from a pool it reuses. Chunks of nearly a
// page made every leaf two pages: each write allocated as much new memory
// as the file, slow to fault in on this project's VMs (a process's first
// 10M holder-block write 1.8-2.6 s; with two chunks to a page, 1.0-2.1 s).
// The margin leaves room for the chunk header and the place that crosses
// the threshold, so nearly every leaf fits its page
// (TestDefaultChunksShareLeafPages).
const (
	pageSize          = 64 << 10
	defaultChunkBytes = pageSize/2 - 1<<10
)

// minPageSize is the smallest bbolt page size of a snapshot file (version 1
// and 2 files were written with 4 KiB pages): a reader checks a file's size
// against it before handing the file to bbolt, which panics on some
// truncated files.
const minPageSize = 4096

// Bucket names.
var (
	bucketMeta    = []byte("meta")
	bucketWorkers = []byte("workers")
	bucketPlaces  = []byte("places")
)

// Keys of the meta bucket. Every one is required.
const (
	metaFormat       = "format"        // uint32 big-endian
	metaWALIndex     = "wal_index"     // uint64 big-endian
	metaCreated      = "created"       // int64 big-endian, Unix nanoseconds
	metaHashSeed     = "hash_seed"     // uint64 big-endian
	metaSeqRule      = "seq_rule"      // string, == SeqRule
	metaEntries      = "entries"       // uint64 big-endian
	metaHolderBlocks = "holder_blocks" // uint64 big-endian
	metaWorkerKeys   = "worker_keys"   // uint64 big-endian
	metaPlaces       = "places"        // uint64 big-endian
	metaChunks       = "chunks"        // uint64 big-endian
	metaCounters     = "counters"      // JSON engine.Counters
	metaSources      = "sources"       // JSON []Source
	metaChecksum     = "checksum"      // uint32 big-endian CRC-32C, see checksum
	metaMetaChecksum = "meta_checksum" // uint32 big-endian CRC-32C of every other meta key and value, in key order
)

// workersKey is the one key of the workers bucket: the worker-key table, 12
// bytes per worker index (WorkerID uint64, DPRank uint32, big-endian), sorted.
var workersKey = []byte("table")

const workerRecLen = 12

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The data checksum is CRC-32C over the worker table value, then every
// chunk's key and value in key order.
func checksumUpdate(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// A chunk key is the position of its first place and the chunk's sequence
// number (0, 1, 2, ... in file order), both big-endian uint32: keys sort in
// position order and never collide.
func chunkKey(firstPos, seq uint32) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint32(k, firstPos)
	binary.BigEndian.PutUint32(k[4:], seq)
	return k
}

// keyText is a key as an error names it: in hex, or, when a damaged file
// gives it more bytes than a chunk key has, its first 8 bytes and its
// length (a damaged key size made the hex of megabytes of the file, and of
// memory past it, an error message).
func keyText(k []byte) string {
	if len(k) <= 8 {
		return fmt.Sprintf("%x", k)
	}
	return fmt.Sprintf("%x... (%d bytes)", k[:8], len(k))
}

func parseChunkKey(k []byte) (firstPos, seq uint32, err error) {
	if len(k) != 8 {
		return 0, 0, fmt.Errorf("chunk key of %d bytes", len(k))
	}
	return binary.BigEndian.Uint32(k), binary.BigEndian.Uint32(k[4:]), nil
}

// chunkHeader is the uncompressed head of a chunk value; the snappy block of
// the places follows it.
//
//	uvarint last position
//	uvarint ordinal of the first place (places are numbered 1, 2, ... in file order)
//	uvarint number of places
//	uvarint number of holder-blocks
//
// The snappy-decoded body is, per place:
//
//	uvarint position - previous position (the first place: - the key's first position)
//	uvarint ordinal - parent ordinal, or 0 when the place has no parent
//	8 bytes tokens hash, little-endian
//	8 bytes seq, little-endian
//	uvarint number of holders (>= 1)
//	per holder, in worker-index order:
//	  uvarint (worker index - previous worker index - 1) << 2
//	          | (2 if the first block hash equals the seq and is omitted; version 1: no such bit, shift 1)
//	          | (1 if more than one block hash)
//	  [uvarint number of block hashes - 2, when flagged; the omitted one counts]
//	  8 bytes per block hash not omitted, little-endian
type chunkHeader struct {
	lastPos      uint32
	firstOrd     uint64
	places       int
	holderBlocks int
	body         []byte // the snappy block
}

func appendChunkHeader(dst []byte, h chunkHeader) []byte {
	dst = binary.AppendUvarint(dst, uint64(h.lastPos))
	dst = binary.AppendUvarint(dst, h.firstOrd)
	dst = binary.AppendUvarint(dst, uint64(h.places))
	dst = binary.AppendUvarint(dst, uint64(h.holderBlocks))
	return dst
}

func parseChunkHeader(v []byte) (chunkHeader, error) {
	var h chunkHeader
	var vals [4]uint64
	for i := range vals {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			return h, errors.New("chunk header truncated")
		}
		vals[i], v = x, v[n:]
	}
	if vals[0] > math.MaxUint32 || vals[1] == 0 || vals[1] > math.MaxUint32 || vals[2] == 0 || vals[2] > math.MaxUint32 || vals[3] > math.MaxInt32 {
		return h, errors.New("chunk header out of range")
	}
	h.lastPos, h.firstOrd, h.places, h.holderBlocks, h.body = uint32(vals[0]), vals[1], int(vals[2]), int(vals[3]), v
	return h, nil
}

// minPlaceBytes is the least a place takes in a chunk body: two uvarints,
// the tokens hash and seq, a holder count and one holder's uvarint.
const minPlaceBytes = 20

// Flags of a holder's first uvarint.
const (
	holderMulti    = 1 // more than one block hash: their number - 2 follows
	holderSeqFirst = 2 // the first block hash is the place's seq, not written (version 2)
)

// encoder builds chunk bodies from place records.
type encoder struct {
	seq      uint32 // chunk number
	body     []byte
	firstPos uint32
	lastPos  uint32
	firstOrd uint64
	places   int
	hbs      int
}

func (e *encoder) reset(ord uint64) {
	e.body = e.body[:0]
	e.places, e.hbs, e.firstOrd = 0, 0, ord
}

// add encodes one place. ord is its ordinal, parentOrd its parent's (0: none);
// widx maps each holder to its worker index.
func (e *encoder) add(rec *engine.PlaceRecord, ord, parentOrd uint64, widx func(*engine.HolderRecord) (uint32, bool)) error {
	prev := e.lastPos
	if e.places == 0 {
		e.firstPos, prev = rec.Position, rec.Position
	}
	b := e.body
	b = binary.AppendUvarint(b, uint64(rec.Position-prev))
	var pd uint64
	if parentOrd != 0 {
		pd = ord - parentOrd
	}
	b = binary.AppendUvarint(b, pd)
	b = binary.LittleEndian.AppendUint64(b, rec.TokensHash)
	b = binary.LittleEndian.AppendUint64(b, rec.Seq)
	b = binary.AppendUvarint(b, uint64(len(rec.Holders)))
	prevW := int64(-1)
	for i := range rec.Holders {
		h := &rec.Holders[i]
		w, ok := widx(h)
		if !ok {
			return fmt.Errorf("place at position %d: holder %v not in the worker table", rec.Position, h.Worker)
		}
		if int64(w) <= prevW {
			return fmt.Errorf("place at position %d: holders not sorted by worker key", rec.Position)
		}
		n := len(h.BlockHashes)
		if n == 0 {
			return fmt.Errorf("place at position %d: holder %v without block hash", rec.Position, h.Worker)
		}
		x := uint64(int64(w)-prevW-1) << 2
		hashes := h.BlockHashes
		if hashes[0] == rec.Seq {
			x |= holderSeqFirst
			hashes = hashes[1:]
		}
		if n > 1 {
			x |= holderMulti
		}
		b = binary.AppendUvarint(b, x)
		if n > 1 {
			b = binary.AppendUvarint(b, uint64(n-2))
		}
		for _, bh := range hashes {
			b = binary.LittleEndian.AppendUint64(b, bh)
		}
		prevW = int64(w)
		e.hbs += n
	}
	e.body = b
	e.lastPos = rec.Position
	e.places++
	return nil
}

// appendValue appends the chunk value (header and snappy block) to dst.
// With stored set, the block holds the body as one literal, uncompressed:
// still a snappy block, read as any other.
func (e *encoder) appendValue(dst []byte, stored bool) []byte {
	h := chunkHeader{lastPos: e.lastPos, firstOrd: e.firstOrd, places: e.places, holderBlocks: e.hbs}
	dst = slices.Grow(dst, 4*binary.MaxVarintLen64+snappy.MaxEncodedLen(len(e.body)))
	dst = appendChunkHeader(dst, h)
	if stored {
		return appendSnappyStored(dst, e.body)
	}
	enc := snappy.Encode(dst[len(dst):cap(dst)], e.body)
	return dst[:len(dst)+len(enc)]
}

// chunkOut is one chunk's bbolt key and value, and the entry keys of its
// places, in order.
type chunkOut struct {
	key, value []byte
	entries    []entryKey
}

// entryKey is the key of a place's entry.
type entryKey struct {
	pos uint32
	th  uint64
}

// appendSnappyStored appends src to dst as a snappy block of one literal:
// the decoded length, a literal tag with the length less one (in the tag
// itself below 60, else in 1 to 4 little-endian bytes after it), src.
func appendSnappyStored(dst, src []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(src)))
	if len(src) == 0 {
		return dst
	}
	switch n := uint32(len(src) - 1); {
	case n < 60:
		dst = append(dst, byte(n)<<2)
	case n < 1<<8:
		dst = append(dst, 60<<2, byte(n))
	case n < 1<<16:
		dst = append(dst, 61<<2, byte(n), byte(n>>8))
	case n < 1<<24:
		dst = append(dst, 62<<2, byte(n), byte(n>>8), byte(n>>16))
	default:
		dst = append(dst, 63<<2, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	}
	return append(dst, src...)
}

// storeRun is how many chunks are stored uncompressed after one that
// snappy shrank by less than a twentieth: block hashes are random, and
// compressing them cost a tenth of a write for nothing. Every storeRun+1st
// chunk is compressed again, to notice data that does compress.
const storeRun = 15

// decoder decodes chunks back into place records, checking everything that
// does not need the engine: order, ranges, references, counts.
type decoder struct {
	version uint32 // the file's format version
	workers []engine.WorkerKey
	sel     []bool // selected worker indices; nil: all
	// countEntries counts distinct (position, tokens hash) pairs, for checks
	// without an engine (Load leaves it to the engine, which counts anyway).
	countEntries bool

	raw []byte

	// Running state across chunks, in file order.
	hasPrev     bool
	prevPos     uint32
	entries     entryCounter
	nextOrd     uint64
	hbs, places int
}

// entryCounter counts entries (distinct (position, tokens hash) pairs) of
// places that come in position order, in any order within a position: it
// keeps one position's tokens hashes and counts the distinct ones when the
// position changes. Counting by sorting reads and writes memory in
// sequence; a hash set the size of a large position (a million places at
// position 0 is common) missed the cache on every place, and doubled the
// time of a 10M holder-block write.
type entryCounter struct {
	pos    uint32
	ths    []uint64
	tmp    []uint64
	counts []int32
	n      int // entries of the positions before pos
}

func (c *entryCounter) add(pos uint32, th uint64) {
	if pos != c.pos {
		c.flush()
		c.pos = pos
	}
	c.ths = append(c.ths, th)
}

// total returns the entries counted so far.
func (c *entryCounter) total() int {
	c.flush()
	return c.n
}

func (c *entryCounter) flush() {
	c.n += c.distinct(c.ths)
	c.ths = c.ths[:0]
}

// distinctBits is how many top bits of a mixed hash pick its bucket when
// distinct partitions a large position.
const distinctBits = 16

// distinct returns how many distinct values xs holds, reordering it. A
// large set is first partitioned by the top bits of a multiplicative hash
// of each value (tokens hashes need not be well spread) so that equal
// values share a small bucket, then each bucket is sorted.
func (c *entryCounter) distinct(xs []uint64) int {
	if len(xs) < 1<<12 {
		slices.Sort(xs)
		return len(slices.Compact(xs))
	}
	if c.counts == nil {
		c.counts = make([]int32, 1<<distinctBits+1)
	}
	counts := c.counts
	clear(counts)
	for _, x := range xs {
		counts[mixBits(x)+1]++
	}
	for b := 1; b < len(counts); b++ {
		counts[b] += counts[b-1]
	}
	c.tmp = slices.Grow(c.tmp[:0], len(xs))[:len(xs)]
	for _, x := range xs {
		b := mixBits(x)
		c.tmp[counts[b]] = x
		counts[b]++
	}
	n, from := 0, 0
	for b := range 1 << distinctBits {
		to := int(counts[b])
		bucket := c.tmp[from:to]
		slices.Sort(bucket)
		n += len(slices.Compact(bucket))
		from = to
	}
	return n
}

// mixBits is the bucket of x: the top distinctBits bits of x times the
// golden ratio (Fibonacci hashing spreads small and sequential values too).
func mixBits(x uint64) int { return int(x * 0x9e3779b97f4a7c15 >> (64 - distinctBits)) }

// chunk decodes one chunk and appends to out every place with from <=
// position <= to that has a selected holder (its Holders trimmed to the
// selected ones). A record's ID is its ordinal, Parent its parent's ordinal.
// When d.nextOrd is set, the chunk must start at that ordinal. Decoding
// straight into the batch, rather than record by record into the
// decoder's own buffers, spares a copy of every place on the way to the
// engine's loader. On error, out holds the places decoded before it.
// maxSnappyExpansion bounds how many bytes snappy can decode from one: a
// 3-byte copy op yields at most 64 (measured: 64 MiB of zeros compresses to
// 3,147,780 bytes, 21.3 to 1).
const maxSnappyExpansion = 22

// checkDecodedLen checks a chunk's declared uncompressed length, n, before
// anything is allocated for it, against what its compressed bytes can
// decode to. A chunk holds whole places, so it has no fixed limit: one place
// held under millions of block hashes makes one chunk of tens of MB (a
// fixed 64 MiB limit made Load refuse a file Write had published).
func checkDecodedLen(n, compressed int) error {
	if n < 0 || n/maxSnappyExpansion > compressed {
		return fmt.Errorf("chunk of %d bytes uncompressed from %d: more than snappy can decode", n, compressed)
	}
	return nil
}

func (d *decoder) chunk(k, v []byte, from, to uint32, out *engine.PlaceBatch) error {
	firstPos, _, err := parseChunkKey(k)
	if err != nil {
		return err
	}
	h, err := parseChunkHeader(v)
	if err != nil {
		return err
	}
	if h.lastPos < firstPos {
		return errors.New("chunk header: last position before first")
	}
	n, err := snappy.DecodedLen(h.body)
	if err != nil {
		return fmt.Errorf("chunk decompression: %w", err)
	}
	if err := checkDecodedLen(n, len(h.body)); err != nil {
		return err
	}
	if cap(d.raw) < n {
		d.raw = make([]byte, n)
	}
	body, err := snappy.Decode(d.raw[:n], h.body)
	if err != nil {
		return fmt.Errorf("chunk decompression: %w", err)
	}
	// A holder-block takes 8 bytes, or, omitted, at least the byte of
	// its holder's uvarint.
	maxHBs := len(body) / 8
	if d.version >= 2 {
		maxHBs = len(body)
	}
	if h.holderBlocks > maxHBs {
		return errors.New("chunk header: holder-block count exceeds its data")
	}
	if d.nextOrd != 0 && h.firstOrd != d.nextOrd {
		return fmt.Errorf("chunk starts at place %d, want %d: a chunk is missing or repeated", h.firstOrd, d.nextOrd)
	}
	// Room for what the header announces, as far as the data can hold it
	// written out (8 bytes a block hash, 20 a place at least): a damaged
	// header must not make a large allocation. Omitted block hashes (version
	// 2) grow the batch as they come; batches are reused, so only the
	// first chunks grow it.
	out.Workers = d.workers
	out.Hashes = slices.Grow(out.Hashes, min(h.holderBlocks, len(body)/8))
	out.Holders = slices.Grow(out.Holders, min(h.holderBlocks, len(body)/8))
	out.Places = slices.Grow(out.Places, min(h.places, len(body)/minPlaceBytes))
	ord := h.firstOrd
	pos := firstPos
	hbs := 0
	for i := 0; i < h.places; i++ {
		var x uint64
		if x, body, err = uvarint(body); err != nil {
			return err
		}
		if uint64(pos)+x > uint64(h.lastPos) {
			return errors.New("place position beyond the chunk's last position")
		}
		pos += uint32(x)
		if i == 0 && x != 0 {
			return errors.New("first place is not at the chunk key's position")
		}
		var pd uint64
		if pd, body, err = uvarint(body); err != nil {
			return err
		}
		if pd >= ord {
			return fmt.Errorf("place %d: parent before the first place", ord)
		}
		if len(body) < 16 {
			return errors.New("place truncated")
		}
		th := binary.LittleEndian.Uint64(body)
		seq := binary.LittleEndian.Uint64(body[8:])
		body = body[16:]
		if d.hasPrev && pos < d.prevPos {
			return fmt.Errorf("place %d out of position order", ord)
		}
		d.hasPrev, d.prevPos = true, pos
		if d.countEntries {
			d.entries.add(pos, th)
		}
		var nh uint64
		if nh, body, err = uvarint(body); err != nil {
			return err
		}
		if nh == 0 || nh > uint64(len(body)) {
			return fmt.Errorf("place %d: bad holder count %d", ord, nh)
		}
		h0, x0 := len(out.Holders), len(out.Hashes)
		w := int64(-1)
		for range nh {
			if x, body, err = uvarint(body); err != nil {
				return err
			}
			seqFirst, shift := false, 1
			if d.version >= 2 {
				seqFirst, shift = x&holderSeqFirst != 0, 2
			}
			// Checked before it is added: a delta near 2^63 would wrap.
			dw := x >> shift
			if dw >= uint64(len(d.workers)) || w+int64(dw)+1 >= int64(len(d.workers)) {
				return fmt.Errorf("place %d: worker index beyond the worker table", ord)
			}
			w += int64(dw) + 1
			nb := uint64(1)
			if x&holderMulti != 0 {
				if nb, body, err = uvarint(body); err != nil {
					return err
				}
				if nb > math.MaxUint32 {
					return fmt.Errorf("place %d: bad block hash count", ord)
				}
				nb += 2
			}
			written := nb // block hashes in the body
			if seqFirst {
				written--
			}
			if written > uint64(len(body)/8) {
				return errors.New("place truncated")
			}
			hbs += int(nb)
			if hbs > h.holderBlocks {
				return errors.New("more holder-blocks than the chunk header says")
			}
			if d.sel != nil && !d.sel[w] {
				body = body[8*written:]
				continue
			}
			if seqFirst {
				out.Hashes = append(out.Hashes, seq)
			}
			for j := uint64(0); j < written; j++ {
				out.Hashes = append(out.Hashes, binary.LittleEndian.Uint64(body[8*j:]))
			}
			body = body[8*written:]
			out.Holders = append(out.Holders, engine.BatchHolder{Worker: uint32(w), HashesEnd: uint32(len(out.Hashes))})
		}
		var parent uint32
		if pd != 0 {
			parent = uint32(ord - pd)
		}
		if len(out.Holders) > h0 && pos >= from && pos <= to {
			out.Places = append(out.Places, engine.BatchPlace{ID: uint32(ord), Parent: parent, Position: pos,
				HoldersEnd: uint32(len(out.Holders)), TokensHash: th, Seq: seq})
		} else {
			out.Holders, out.Hashes = out.Holders[:h0], out.Hashes[:x0]
		}
		ord++
	}
	if len(body) != 0 {
		return errors.New("trailing bytes after the chunk's places")
	}
	if pos != h.lastPos {
		return errors.New("chunk header: last position does not match its places")
	}
	if hbs != h.holderBlocks {
		return errors.New("chunk header: holder-block count does not match its places")
	}
	if ord > math.MaxUint32+1 {
		return errors.New("more than 2^32-1 places")
	}
	d.nextOrd = ord
	d.places += h.places
	d.hbs += hbs
	return nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	x, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errors.New("place truncated")
	}
	return x, b[n:], nil
}
