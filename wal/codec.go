package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/golang/snappy"
	"github.com/kvidx/kvidx/engine"
)

// One tidwall/wal entry holds one batch: the events of one or more Append
// calls, in commit order, plus generic source positions ([Position], e.g.
// source name -> last sequence number, merged last-wins) so event sources can
// resume exactly once. The payload is a compact binary encoding (uvarints,
// fixed 8-byte hashes) of every event field, compressed as a whole with snappy
// (block format) and framed as: 1 format-version byte, the CRC-32C
// (Castagnoli) of what follows, the entry's own index (uvarint), the
// compressed bytes. The index makes an entry read at any other index (a
// segment file renamed, or copied from another log: tidwall/wal numbers
// entries by the files' names) an error instead of the wrong entry; frames
// of version 1, written before, carry no index and are still read. A
// payload shorter than the frame (zero bytes appended to a segment read as
// empty entries in tidwall/wal) is invalid.
//
// Entry payload layout:
//
//	frame   = version(1 byte) crc32c(4 bytes LE, of what follows) [uvarint(index)] snappy-block(batch)
//	          (version 2, what kvidx writes, carries the entry's own index; version 1 did not)
//	batch   = uvarint(#positions) position* uvarint(#events) event*
//	position= uvarint(len(source)) source uvarint(seq)
//	event   = uvarint(worker_id) uvarint(dp_rank) uvarint(event_id) kind(1) flags(1)
//	          [parent(8 LE) if flags&1] [uvarint(start) if flags&2]
//	          uvarint(#blocks) (block_hash(8 LE) tokens_hash(8 LE))*   if not flags&4
//	          uvarint(#blocks) tokens_hash(8 LE)*                        if flags&4
//	          uvarint(#removed) removed_hash(8 LE)*
//
// Hashes are random 64-bit values, so they are stored fixed-width: a uvarint
// would take 9 or 10 bytes for most of them, and snappy cannot shrink them.
// But engines that name blocks by the router's own hash chain (Dynamo's do)
// make every block hash predictable: flag 4 (chained) says block i's hash is
// NextSeq(previous block's hash, tokens_hash i), the first block's previous
// hash being the parent's, or, with no parent, its own tokens hash; such
// events store tokens hashes only, halving a stored block.

// formatVersion is the first byte of every entry kvidx writes: version 2
// frames carry the entry's index under the CRC, so an entry read at another
// index (a segment file renamed, or copied from another log) is refused
// instead of being replayed as the entry it is not. Version 1 frames (logs
// written before) are still read; their numbering is the files' names.
const (
	formatVersion  = 2
	formatVersion1 = 1
)

// frameHeader is the version byte plus the CRC.
const frameHeader = 5

// minFrame is the smallest valid frame: the header plus the 1-byte snappy
// encoding of an empty batch. A zero-length payload (tidwall/wal reads zero
// bytes appended to a segment as empty entries) is never valid.
const minFrame = frameHeader + 1

// maxDecodedLen bounds the decompressed size of one entry, so a corrupt
// length never makes the decoder allocate without bound.
const maxDecodedLen = 1 << 30

// maxSnappyExpansion bounds how many bytes snappy decodes from one: a 3-byte
// copy op yields at most 64 (64 MiB of zeros compresses 21.3 to 1). An entry
// whose declared length its compressed bytes cannot reach is refused before
// snappy allocates that length.
const maxSnappyExpansion = 22

const (
	flagParent = 1 << iota
	flagStart
	flagChained
	flagsKnown = flagParent | flagStart | flagChained
)

// chainedHash is what a chained event's block i is named: the router seq of
// its tokens hash after the previous block's hash (see the layout above).
func chainedHash(ev *engine.Event, i int) uint64 {
	th := ev.Blocks[i].TokensHash
	switch {
	case i > 0:
		return engine.NextSeq(ev.Blocks[i-1].BlockHash, th)
	case ev.HasParent:
		return engine.NextSeq(ev.ParentHash, th)
	}
	return th
}

// chained reports whether every block hash of ev follows the chain.
func chained(ev *engine.Event) bool {
	if len(ev.Blocks) == 0 {
		return false
	}
	for i, b := range ev.Blocks {
		if b.BlockHash != chainedHash(ev, i) {
			return false
		}
	}
	return true
}

// minEventLen is the smallest encoded event: worker, rank, id, kind, flags,
// #blocks, #removed, one byte each.
const minEventLen = 7

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errDecode is wrapped by every decoding failure.
var errDecode = errors.New("malformed batch")

// appendPositions appends the positions section of a batch.
func appendPositions(dst []byte, ps []Position) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ps)))
	for _, p := range ps {
		dst = binary.AppendUvarint(dst, uint64(len(p.Source)))
		dst = append(dst, p.Source...)
		dst = binary.AppendUvarint(dst, p.Seq)
	}
	return dst
}

// appendEvent appends the encoding of one event.
func appendEvent(dst []byte, ev *engine.Event) []byte {
	dst = binary.AppendUvarint(dst, ev.Worker.WorkerID)
	dst = binary.AppendUvarint(dst, uint64(ev.Worker.DPRank))
	dst = binary.AppendUvarint(dst, ev.EventID)
	var flags byte
	if ev.HasParent {
		flags |= flagParent
	}
	if ev.HasStartPosition {
		flags |= flagStart
	}
	isChained := chained(ev)
	if isChained {
		flags |= flagChained
	}
	dst = append(dst, byte(ev.Kind), flags)
	if ev.HasParent {
		dst = binary.LittleEndian.AppendUint64(dst, ev.ParentHash)
	}
	if ev.HasStartPosition {
		dst = binary.AppendUvarint(dst, ev.StartPosition)
	}
	dst = binary.AppendUvarint(dst, uint64(len(ev.Blocks)))
	for _, b := range ev.Blocks {
		if !isChained {
			dst = binary.LittleEndian.AppendUint64(dst, b.BlockHash)
		}
		dst = binary.LittleEndian.AppendUint64(dst, b.TokensHash)
	}
	dst = binary.AppendUvarint(dst, uint64(len(ev.BlockHashes)))
	for _, h := range ev.BlockHashes {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	return dst
}

// encodeBatch returns the uncompressed encoding of one batch, appended to dst.
func encodeBatch(dst []byte, events []engine.Event, positions []Position) []byte {
	dst = appendPositions(dst, positions)
	dst = binary.AppendUvarint(dst, uint64(len(events)))
	for i := range events {
		dst = appendEvent(dst, &events[i])
	}
	return dst
}

// EntryBound is an upper bound on the bytes an entry of events and
// positions takes in a segment file: each varint at its longest, snappy's
// worst case, the frame and tidwall/wal's length prefix. Callers that must
// keep room for entries before they are encoded (the free-space guard of
// package recovery) count with it.
func EntryBound(events []engine.Event, positions []Position) int64 {
	raw := int64(binary.MaxVarintLen64)
	for _, p := range positions {
		raw += int64(len(p.Source)) + 2*binary.MaxVarintLen64
	}
	raw += binary.MaxVarintLen64
	for i := range events {
		ev := &events[i]
		// worker, rank, id, start position, two counts; kind, flags; parent
		raw += 6*binary.MaxVarintLen64 + 2 + 8
		raw += 16*int64(len(ev.Blocks)) + 8*int64(len(ev.BlockHashes))
	}
	// snappy.MaxEncodedLen's formula, which it only computes for sizes
	// below 4 GiB.
	return 32 + raw + raw/6 + frameHeader + 2*binary.MaxVarintLen64
}

// frame compresses raw, the batch of entry index, into dst (reusing its
// capacity) and returns the complete entry payload: version, CRC-32C of
// what follows, the index, the compressed data.
func frame(dst []byte, index uint64, raw []byte) []byte {
	n := frameHeader + binary.MaxVarintLen64 + snappy.MaxEncodedLen(len(raw))
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = binary.AppendUvarint(dst[:frameHeader], index)
	h := len(dst)
	z := snappy.Encode(dst[h:n], raw)
	dst = dst[:h+len(z)]
	dst[0] = formatVersion
	binary.LittleEndian.PutUint32(dst[1:frameHeader], crc32.Checksum(dst[frameHeader:], castagnoli))
	return dst
}

// checkFrame reports whether p is a complete kvidx entry: known version,
// matching CRC and, in version 2, an index. It never looks inside the
// compressed data.
func checkFrame(p []byte) error {
	_, _, err := frameData(p)
	return err
}

// checkFrameAt is checkFrame for the entry read as entry index: a version 2
// frame that carries another index is refused too.
func checkFrameAt(p []byte, index uint64) error {
	stored, _, err := frameData(p)
	if err != nil {
		return err
	}
	return matchIndex(stored, index)
}

// matchIndex refuses a frame that carries stored (0: none, version 1) where
// entry index was expected: the framing before it is damaged, or the segment
// is not the one its name says.
func matchIndex(stored, index uint64) error {
	if stored != 0 && stored != index {
		return fmt.Errorf("the entry read as entry %d is entry %d (the framing before it damaged, or a segment file renamed or copied from elsewhere?): %w", index, stored, ErrCorrupt)
	}
	return nil
}

// frameData checks p as checkFrame does and returns the index it carries
// (0 in a version 1 frame, which carries none) and its compressed data.
func frameData(p []byte) (index uint64, z []byte, err error) {
	if len(p) < minFrame {
		return 0, nil, fmt.Errorf("entry of %d bytes is shorter than %d: %w", len(p), minFrame, ErrCorrupt)
	}
	if p[0] != formatVersion && p[0] != formatVersion1 {
		return 0, nil, fmt.Errorf("unknown format version %d: %w", p[0], ErrCorrupt)
	}
	want := binary.LittleEndian.Uint32(p[1:frameHeader])
	if got := crc32.Checksum(p[frameHeader:], castagnoli); got != want {
		return 0, nil, fmt.Errorf("crc32c mismatch (stored %08x, computed %08x): %w", want, got, ErrCorrupt)
	}
	z = p[frameHeader:]
	if p[0] == formatVersion1 {
		return 0, z, nil
	}
	index, n := binary.Uvarint(z)
	if n <= 0 || index == 0 || len(z) == n {
		return 0, nil, fmt.Errorf("version %d frame without a valid index: %w", p[0], ErrCorrupt)
	}
	return index, z[n:], nil
}

// decodeEntry checks, decompresses and decodes the payload p of entry
// index. A version 2 frame that carries another index is refused: the
// entry is not the one at that place in the log.
func decodeEntry(p []byte, index uint64) ([]engine.Event, []Position, error) {
	stored, z, err := frameData(p)
	if err != nil {
		return nil, nil, err
	}
	if err := matchIndex(stored, index); err != nil {
		return nil, nil, err
	}
	n, err := snappy.DecodedLen(z)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: snappy: %v", errDecode, err)
	}
	if n > maxDecodedLen || n/maxSnappyExpansion > len(z) {
		return nil, nil, fmt.Errorf("%w: decoded length %d too large for %d compressed bytes", errDecode, n, len(z))
	}
	raw, err := snappy.Decode(nil, z)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: snappy: %v", errDecode, err)
	}
	return decodeBatch(raw)
}

// decoder reads a batch; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at %d bytes from the end", errDecode, what, len(d.b))
	}
	d.b = nil
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail(what)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail(what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// count reads a count of items of at least size bytes each, bounded by what remains.
func (d *decoder) count(what string, size int) int {
	n := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)/size) {
		d.fail(what + " exceeds the remaining bytes")
		return 0
	}
	return int(n)
}

// decodeBatch decodes the uncompressed encoding of one batch. It never
// panics and never allocates more than a small multiple of len(raw).
func decodeBatch(raw []byte) ([]engine.Event, []Position, error) {
	d := &decoder{b: raw}
	var positions []Position
	if np := d.count("position count", 2); np > 0 {
		positions = make([]Position, np)
		for i := range positions {
			l := d.count("source length", 1)
			if d.err != nil {
				break
			}
			positions[i].Source = string(d.b[:l])
			d.b = d.b[l:]
			positions[i].Seq = d.uvarint("position seq")
		}
	}
	var events []engine.Event
	if ne := d.count("event count", minEventLen); ne > 0 {
		events = make([]engine.Event, ne)
		for i := range events {
			if d.err != nil {
				break
			}
			ev := &events[i]
			ev.Worker.WorkerID = d.uvarint("worker id")
			rank := d.uvarint("dp rank")
			if rank > math.MaxUint32 {
				d.fail("dp rank out of range")
			}
			ev.Worker.DPRank = uint32(rank)
			ev.EventID = d.uvarint("event id")
			ev.Kind = engine.EventKind(d.byte1("kind"))
			flags := d.byte1("flags")
			if flags&^flagsKnown != 0 {
				d.fail("unknown flags")
			}
			if flags&flagParent != 0 {
				ev.HasParent = true
				ev.ParentHash = d.u64("parent hash")
			}
			if flags&flagStart != 0 {
				ev.HasStartPosition = true
				ev.StartPosition = d.uvarint("start position")
			}
			isChained := flags&flagChained != 0
			blockLen := 16
			if isChained {
				blockLen = 8
			}
			nb := d.count("block count", blockLen)
			if isChained && nb == 0 {
				d.fail("chained event without blocks")
			}
			if nb > 0 {
				ev.Blocks = make([]engine.Block, nb)
				for j := range ev.Blocks {
					if !isChained {
						ev.Blocks[j].BlockHash = d.u64("block hash")
					}
					ev.Blocks[j].TokensHash = d.u64("tokens hash")
				}
				if isChained && d.err == nil {
					for j := range ev.Blocks {
						ev.Blocks[j].BlockHash = chainedHash(ev, j)
					}
				}
			}
			if nr := d.count("removed count", 8); nr > 0 {
				ev.BlockHashes = make([]uint64, nr)
				for j := range ev.BlockHashes {
					ev.BlockHashes[j] = d.u64("removed hash")
				}
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return events, positions, nil
}
