package ingest

// Wire format.
//
// A vLLM engine publishes on a PUB socket messages of three frames: a
// topic, an 8-byte big-endian batch sequence number, and a msgpack batch
// ([VLLMDecoder]): [ts, [events...], data_parallel_rank] or a map with
// those keys; events are BlockStored, BlockRemoved and AllBlocksCleared,
// tagged by class name as an array (tag first) or a map ("type" key).
// kvidx hashes each stored block's tokens itself (engine.LocalHashes with
// the LoRA salt of lora_name) and keeps the engine's hash as the block hash.
// Hashes may be unsigned or signed integers (bits kept) or bytes (the low 8,
// big-endian). SGLang's publisher is read too: its salted stores' metadata
// map in lora_name's place is skipped, and its EAGLE bigram token_ids
// ([t_i, t_i+1] pairs) are read as each pair's first token.
// BlockStored token ids are hashed as any token list: full blocks only, a
// trailing partial block dropped.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/kvidx/kvidx/engine"
)

// ErrDecode wraps every error of [VLLMDecoder.Decode]: the payload is not a
// vLLM KV-event batch kvidx understands.
var ErrDecode = errors.New("vllm payload")

// VLLMBatch is one decoded vLLM KV-event batch.
type VLLMBatch struct {
	// DPRank is the batch's data_parallel_rank (0 when absent or null).
	DPRank uint32
	// Events are the batch's events, in order, for worker key
	// {WorkerID, DPRank}.
	Events []engine.Event
	// Unknown counts events of an unknown class, skipped.
	Unknown int
	// OtherMedium counts BlockStored and BlockRemoved events of a medium
	// other than the GPU, skipped: vLLM's offloading connector publishes
	// its CPU tier's stores and evictions in the same batches as the GPU
	// block pool's, under the same block hashes, and kvidx indexes what
	// a worker holds on its GPU.
	OtherMedium int
	// OtherGroup counts BlockStored and BlockRemoved events of a KV-cache
	// group that is not a full-attention one (a hybrid model's
	// sliding-window or Mamba group: its block_hashes skip the blocks the
	// window dropped, and its removals name blocks the full-attention group
	// still holds), skipped.
	OtherGroup int
	// TS is the batch's ts (the engine's clock when it made the batch, in
	// seconds) when it is a number; HasTS tells.
	TS    float64
	HasTS bool
}

// VLLMDecoder decodes vLLM's msgpack KV-event batches (EventBatch /
// KVEventBatch) into engine events, with the msgpack package's low-level
// Decoder API (no reflection). The zero value is ready; a VLLMDecoder is not
// safe for concurrent use. Returned events own their slices.
type VLLMDecoder struct {
	r      bytes.Reader
	d      *msgpack.Decoder
	tokens []uint32
	ev     rawEvent
	// partial holds the group_idx values (bit i: group i, below 64) a
	// store named with a kv_cache_spec_kind that holds no whole prefix:
	// their removals carry only group_idx.
	partial uint64
}

// rawEvent holds the fields of one event as decoded, whatever its class.
type rawEvent struct {
	typ        string
	hashes     []uint64
	parent     uint64
	hasParent  bool
	tokens     []uint32
	blockSize  int64
	loraName   string
	haveTokens bool
	// offGPU: a medium other than the GPU was given.
	offGPU bool
	// loraID is lora_id, when given (not null).
	loraID    uint64
	hasLoraID bool
	// group is group_idx, when given; kind is kv_cache_spec_kind.
	group    uint64
	hasGroup bool
	kind     string
	// windowStore: a store of a group that named no full-prefix kind and
	// left blocks out of block_hashes (a window's or Mamba's null blocks).
	windowStore bool
	// labelled: SGLang named the KV components the event is about (with
	// --enable-kv-events-component-types); full: "full" was among them.
	labelled, full bool
}

func decodeErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrDecode, fmt.Sprintf(format, args...))
}

func wrapErr(what string, err error) error {
	if errors.Is(err, ErrDecode) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrDecode, what, err)
}

// Decode decodes one batch payload: an array [ts, [events...],
// data_parallel_rank] or a map with keys "ts", "events" and
// "data_parallel_rank" (unknown trailing elements and keys are ignored).
// Every event gets Worker{workerID, data_parallel_rank}. Errors wrap
// [ErrDecode]; no input panics.
func (v *VLLMDecoder) Decode(payload []byte, workerID uint64) (b VLLMBatch, err error) {
	defer v.trim()
	// The groups a batch teaches count only when the batch decodes: a
	// discarded one must not leave its (maybe garbled) kinds behind.
	partial := v.partial
	defer func() {
		if err != nil {
			v.partial = partial
		}
	}()
	v.start(payload)
	var evs []engine.Event
	var rank uint64
	c, err := v.d.PeekCode()
	if err != nil {
		return b, wrapErr("batch", err)
	}
	switch {
	case isArray(c):
		n, err := v.arrayLen()
		if err != nil {
			return b, wrapErr("batch", err)
		}
		if n < 2 {
			return b, decodeErr("batch: array of %d elements, want at least 2", n)
		}
		if b.TS, b.HasTS, err = v.ts(); err != nil {
			return b, err
		}
		if evs, b.Unknown, b.OtherMedium, b.OtherGroup, err = v.events(); err != nil {
			return b, err
		}
		if n >= 3 {
			if rank, err = v.optUint("data_parallel_rank", math.MaxUint32); err != nil {
				return b, err
			}
		}
		for i := 3; i < n; i++ {
			if err := v.skip(); err != nil {
				return b, wrapErr("batch", err)
			}
		}
	case isMap(c):
		n, err := v.mapLen()
		if err != nil {
			return b, wrapErr("batch", err)
		}
		haveEvents := false
		for range n {
			key, err := v.key()
			if err != nil {
				return b, wrapErr("batch key", err)
			}
			switch key {
			case "events":
				if evs, b.Unknown, b.OtherMedium, b.OtherGroup, err = v.events(); err != nil {
					return b, err
				}
				haveEvents = true
			case "data_parallel_rank":
				if rank, err = v.optUint("data_parallel_rank", math.MaxUint32); err != nil {
					return b, err
				}
			case "ts":
				if b.TS, b.HasTS, err = v.ts(); err != nil {
					return b, err
				}
			default:
				if err := v.skip(); err != nil {
					return b, wrapErr("batch "+key, err)
				}
			}
		}
		if !haveEvents {
			return b, decodeErr("batch: no \"events\"")
		}
	default:
		return b, decodeErr("batch: want an array or a map, got code 0x%02x", c)
	}
	if v.r.Len() != 0 {
		return b, decodeErr("batch: %d trailing bytes", v.r.Len())
	}
	b.DPRank = uint32(rank)
	for i := range evs {
		evs[i].Worker = engine.WorkerKey{WorkerID: workerID, DPRank: b.DPRank}
	}
	b.Events = evs
	return b, nil
}

// start points the decoder at payload.
func (v *VLLMDecoder) start(payload []byte) {
	v.r.Reset(payload)
	if v.d == nil {
		v.d = msgpack.NewDecoder(&v.r)
	} else {
		v.d.Reset(&v.r)
	}
}

// maxKeptScratch bounds the scratch (block hashes, token ids) a decoder
// keeps between payloads, in elements: one huge batch must not pin its
// buffers for the life of a source.
const maxKeptScratch = 1 << 16

func (v *VLLMDecoder) trim() {
	if cap(v.tokens) > maxKeptScratch {
		v.tokens = nil
	}
	if cap(v.ev.hashes) > maxKeptScratch {
		v.ev.hashes = nil
	}
	v.ev.tokens = nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

// arrayLen decodes an array header (not nil), checking the declared length
// against the bytes left (each element takes at least one byte).
func (v *VLLMDecoder) arrayLen() (int, error) {
	n, err := v.d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, errors.New("null, want an array")
	}
	if n > v.r.Len() {
		return 0, fmt.Errorf("array of %d elements in %d bytes", n, v.r.Len())
	}
	return n, nil
}

func (v *VLLMDecoder) mapLen() (int, error) {
	n, err := v.d.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, errors.New("null, want a map")
	}
	if n > v.r.Len()/2 {
		return 0, fmt.Errorf("map of %d entries in %d bytes", n, v.r.Len())
	}
	return n, nil
}

// key decodes a map key: a string (bytes accepted too).
func (v *VLLMDecoder) key() (string, error) {
	c, err := v.d.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("key: want a string, got code 0x%02x", c)
	}
	return v.str()
}

// str decodes a string or bytes value, checking its length first.
func (v *VLLMDecoder) str() (string, error) {
	n, err := v.d.DecodeBytesLen()
	if err != nil {
		return "", err
	}
	if n < 0 {
		return "", nil
	}
	if n > v.r.Len() {
		return "", fmt.Errorf("string of %d bytes in %d", n, v.r.Len())
	}
	buf := make([]byte, n)
	if err := v.d.ReadFull(buf); err != nil {
		return "", err
	}
	return string(buf), nil
}

// skip skips one value of any depth without recursion.
func (v *VLLMDecoder) skip() error {
	for pending := 1; pending > 0; pending-- {
		c, err := v.d.PeekCode()
		if err != nil {
			return err
		}
		switch {
		case isArray(c):
			n, err := v.arrayLen()
			if err != nil {
				return err
			}
			pending += n
		case isMap(c):
			n, err := v.mapLen()
			if err != nil {
				return err
			}
			pending += 2 * n
		case msgpcode.IsString(c) || msgpcode.IsBin(c):
			n, err := v.d.DecodeBytesLen()
			if err != nil {
				return err
			}
			if err := v.discard(n); err != nil {
				return err
			}
		case msgpcode.IsExt(c):
			_, n, err := v.d.DecodeExtHeader()
			if err != nil {
				return err
			}
			if err := v.discard(n); err != nil {
				return err
			}
		default: // nil, bool, number: at most 9 bytes
			if err := v.d.Skip(); err != nil {
				return err
			}
		}
	}
	return nil
}

// discard skips n payload bytes of a string, bytes or ext value. The msgpack
// package's Skip reads such a value into its decoder's buffer, which it grows
// by up to 1 MiB towards the declared length and keeps even when the payload
// ends first: one decoder fed payloads that declare huge lengths grew without
// bound (gigabytes after 100,000 corrupt payloads).
func (v *VLLMDecoder) discard(n int) error {
	if n < 0 || n > v.r.Len() {
		return fmt.Errorf("value of %d bytes in %d", n, v.r.Len())
	}
	_, err := v.r.Seek(int64(n), io.SeekCurrent)
	return err
}

func (v *VLLMDecoder) isNil() (bool, error) {
	c, err := v.d.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, v.d.DecodeNil()
	}
	return false, nil
}

// optUint decodes a non-negative integer at most max, or nil (0).
func (v *VLLMDecoder) optUint(what string, max uint64) (uint64, error) {
	c, err := v.d.PeekCode()
	if err != nil {
		return 0, wrapErr(what, err)
	}
	if c == msgpcode.Nil {
		return 0, v.d.DecodeNil()
	}
	return v.uint(what, max)
}

// TS returns the ts of a batch payload (see VLLMBatch.TS) without decoding
// its events; ok is false when it has none or the payload is malformed.
func (v *VLLMDecoder) TS(payload []byte) (ts float64, ok bool) {
	defer v.trim()
	v.start(payload)
	c, err := v.d.PeekCode()
	if err != nil {
		return 0, false
	}
	switch {
	case isArray(c):
		if n, err := v.arrayLen(); err != nil || n < 1 {
			return 0, false
		}
		ts, ok, _ = v.ts()
		return ts, ok
	case isMap(c):
		n, err := v.mapLen()
		if err != nil {
			return 0, false
		}
		// The last "ts" key, as Decode keeps (a map may repeat a key).
		for range n {
			key, err := v.key()
			if err != nil {
				return 0, false
			}
			if key != "ts" {
				if v.skip() != nil {
					return 0, false
				}
				continue
			}
			if ts, ok, err = v.ts(); err != nil {
				return 0, false
			}
		}
		return ts, ok
	}
	return 0, false
}

// ts decodes a batch's ts: a number (float or integer), or anything else,
// skipped (ok false), as kvidx does not depend on it.
func (v *VLLMDecoder) ts() (ts float64, ok bool, err error) {
	c, err := v.d.PeekCode()
	if err != nil {
		return 0, false, wrapErr("batch ts", err)
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		if err := v.skip(); err != nil {
			return 0, false, wrapErr("batch ts", err)
		}
		return 0, false, nil
	}
	ts, err = v.d.DecodeFloat64()
	if err != nil {
		return 0, false, wrapErr("batch ts", err)
	}
	return ts, !math.IsNaN(ts) && !math.IsInf(ts, 0), nil
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

func isNegInt(c byte) bool {
	return c >= msgpcode.NegFixedNumLow || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

// uint decodes a non-negative integer at most max.
func (v *VLLMDecoder) uint(what string, max uint64) (uint64, error) {
	c, err := v.d.PeekCode()
	if err != nil {
		return 0, wrapErr(what, err)
	}
	if !isInt(c) {
		return 0, decodeErr("%s: want an integer, got code 0x%02x", what, c)
	}
	if isNegInt(c) {
		n, err := v.d.DecodeInt64()
		if err != nil {
			return 0, wrapErr(what, err)
		}
		if n < 0 {
			return 0, decodeErr("%s: negative (%d)", what, n)
		}
		if uint64(n) > max {
			return 0, decodeErr("%s: %d out of range", what, n)
		}
		return uint64(n), nil
	}
	n, err := v.d.DecodeUint64()
	if err != nil {
		return 0, wrapErr(what, err)
	}
	if n > max {
		return 0, decodeErr("%s: %d out of range", what, n)
	}
	return n, nil
}

// hash decodes a block hash: an unsigned integer, a signed one (its bits),
// or bytes (the low 8, big-endian; shorter ones zero-extended).
func (v *VLLMDecoder) hash(what string) (uint64, error) {
	c, err := v.d.PeekCode()
	if err != nil {
		return 0, wrapErr(what, err)
	}
	switch {
	case isNegInt(c):
		n, err := v.d.DecodeInt64()
		if err != nil {
			return 0, wrapErr(what, err)
		}
		return uint64(n), nil
	case isInt(c):
		n, err := v.d.DecodeUint64()
		if err != nil {
			return 0, wrapErr(what, err)
		}
		return n, nil
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		n, err := v.d.DecodeBytesLen()
		if err != nil {
			return 0, wrapErr(what, err)
		}
		if n < 0 || n > v.r.Len() {
			return 0, decodeErr("%s: %d bytes in %d", what, n, v.r.Len())
		}
		if n == 0 {
			return 0, decodeErr("%s: empty bytes", what)
		}
		var buf [8]byte
		if n > 8 {
			if err := v.discard(n - 8); err != nil {
				return 0, wrapErr(what, err)
			}
			n = 8
		}
		if err := v.d.ReadFull(buf[8-n:]); err != nil {
			return 0, wrapErr(what, err)
		}
		return binary.BigEndian.Uint64(buf[:]), nil
	}
	return 0, decodeErr("%s: want an integer or bytes, got code 0x%02x", what, c)
}

func (v *VLLMDecoder) hashes(what string, dst []uint64) ([]uint64, error) {
	if null, err := v.isNil(); err != nil || null {
		return dst[:0], err
	}
	n, err := v.arrayLen()
	if err != nil {
		return nil, wrapErr(what, err)
	}
	dst = dst[:0]
	for i := range n {
		h, err := v.hash(fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		dst = append(dst, h)
	}
	return dst, nil
}

func (v *VLLMDecoder) tokenIDs(dst []uint32) ([]uint32, error) {
	if null, err := v.isNil(); err != nil || null {
		return dst[:0], err
	}
	n, err := v.arrayLen()
	if err != nil {
		return nil, wrapErr("token_ids", err)
	}
	dst = dst[:0]
	for i := range n {
		c, err := v.d.PeekCode()
		if err != nil {
			return nil, wrapErr("token_ids", err)
		}
		if isArray(c) {
			// SGLang under EAGLE keys its radix cache by bigrams and
			// publishes token_ids as [t_i, t_i+1] pairs, one a position
			// (sgl-project/sglang PR 39610; ai-dynamo/dynamo
			// lib/kv-router/src/zmq_wire/types.rs, KvTokenIds::Bigram):
			// the block holds the first of each.
			t, err := v.bigramFirst(i)
			if err != nil {
				return nil, err
			}
			dst = append(dst, t)
			continue
		}
		t, err := v.uint("token_ids", math.MaxUint32)
		if err != nil {
			return nil, err
		}
		dst = append(dst, uint32(t))
	}
	return dst, nil
}

// bigramFirst decodes token_ids[i] as a pair of token ids and returns
// the first. The element's name is formatted only on failure: an EAGLE
// store has one pair per token.
func (v *VLLMDecoder) bigramFirst(i int) (uint32, error) {
	var pair [2]uint64
	n, err := v.arrayLen()
	if err == nil && n != 2 {
		err = fmt.Errorf("array of %d elements, want a pair", n)
	}
	for j := 0; err == nil && j < 2; j++ {
		pair[j], err = v.uint("token", math.MaxUint32)
	}
	if err != nil {
		return 0, wrapErr(fmt.Sprintf("token_ids[%d]", i), err)
	}
	return uint32(pair[0]), nil
}

// events decodes the events array.
func (v *VLLMDecoder) events() ([]engine.Event, int, int, int, error) {
	n, err := v.arrayLen()
	if err != nil {
		return nil, 0, 0, 0, wrapErr("events", err)
	}
	// The declared count reserves only what a payload that size could
	// decode to (a known event takes at least 14 bytes, ["BlockRemoved"];
	// an engine.Event is
	// about 110): a corrupt 1 MiB array header reserved 100 MiB.
	evs := make([]engine.Event, 0, min(n, v.r.Len()/14+1))
	unknown, other, otherGroup := 0, 0, 0
	for i := range n {
		ev, ok, err := v.event()
		if err != nil {
			return nil, 0, 0, 0, fmt.Errorf("event %d: %w", i, err)
		}
		if !ok {
			switch {
			case v.ev.otherMedium():
				other++
			case v.ev.otherGroup(v.partial):
				otherGroup++
			default:
				unknown++
			}
			continue
		}
		evs = append(evs, ev)
	}
	return evs, unknown, other, otherGroup, nil
}

// BlockStored's and BlockRemoved's fields in array form, after the tag.
var (
	storedFields  = [...]string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"}
	removedFields = [...]string{"block_hashes", "medium", "group_idx"}
)

// event decodes one event; ok is false for an unknown class, or an event of
// another medium than the GPU (v.ev.offGPU), skipped.
func (v *VLLMDecoder) event() (ev engine.Event, ok bool, err error) {
	r := &v.ev
	r.typ, r.hashes, r.hasParent, r.parent, r.tokens, r.blockSize, r.loraName, r.haveTokens, r.offGPU = "", r.hashes[:0], false, 0, nil, 0, "", false, false
	r.loraID, r.hasLoraID = 0, false
	r.group, r.hasGroup, r.kind, r.windowStore = 0, false, "", false
	r.labelled, r.full = false, false
	c, err := v.d.PeekCode()
	if err != nil {
		return ev, false, wrapErr("event", err)
	}
	switch {
	case isArray(c):
		n, err := v.arrayLen()
		if err != nil {
			return ev, false, wrapErr("event", err)
		}
		if n < 1 {
			return ev, false, decodeErr("event: empty array")
		}
		if r.typ, err = v.tag(); err != nil {
			return ev, false, err
		}
		var fields []string
		switch r.typ {
		case "BlockStored":
			fields = storedFields[:]
		case "BlockRemoved":
			fields = removedFields[:]
		}
		for i := 1; i < n; i++ {
			if i-1 < len(fields) {
				err = v.field(fields[i-1])
			} else {
				err = v.skip()
			}
			if err != nil {
				return ev, false, wrapErr(r.typ, err)
			}
		}
	case isMap(c):
		n, err := v.mapLen()
		if err != nil {
			return ev, false, wrapErr("event", err)
		}
		for range n {
			key, err := v.key()
			if err != nil {
				return ev, false, wrapErr("event key", err)
			}
			if key == "type" {
				if r.typ, err = v.tag(); err != nil {
					return ev, false, err
				}
				continue
			}
			if err := v.field(key); err != nil {
				return ev, false, wrapErr("event", err)
			}
		}
		if r.typ == "" {
			return ev, false, decodeErr("event: no \"type\"")
		}
	default:
		return ev, false, decodeErr("event: want an array or a map, got code 0x%02x", c)
	}
	if r.otherMedium() {
		return ev, false, nil // skipped, counted by events as OtherMedium
	}
	if r.typ == "BlockStored" && r.hasGroup {
		// A group that names no full-prefix kind (vLLM before
		// kv_cache_spec_kind, or "unknown") and leaves blocks out of
		// block_hashes is a window or state group all the same.
		r.windowStore = !fullKind(r.kind) && !partialKind(r.kind) && r.blockSize > 0 &&
			int64(len(r.tokens))/r.blockSize > int64(len(r.hashes))
		// A group's kind is named by its stores only: remember it for
		// its removals.
		switch {
		case r.group >= maxGroups:
		case partialKind(r.kind) || r.windowStore:
			v.partial |= 1 << r.group
		case fullKind(r.kind):
			v.partial &^= 1 << r.group
		}
	}
	if r.otherGroup(v.partial) {
		return ev, false, nil // skipped, counted by events as OtherGroup
	}
	return v.build()
}

func (v *VLLMDecoder) tag() (string, error) {
	c, err := v.d.PeekCode()
	if err != nil {
		return "", wrapErr("event tag", err)
	}
	if !msgpcode.IsString(c) {
		return "", decodeErr("event tag: want a string, got code 0x%02x", c)
	}
	s, err := v.str()
	if err != nil {
		return "", wrapErr("event tag", err)
	}
	if s == "" {
		return "", decodeErr("event tag: empty")
	}
	return s, nil
}

// field decodes one named event field into v.ev (unknown ones skipped).
func (v *VLLMDecoder) field(name string) (err error) {
	r := &v.ev
	switch name {
	case "block_hashes":
		r.hashes, err = v.hashes(name, r.hashes)
	case "parent_block_hash":
		var null bool
		if null, err = v.isNil(); err == nil && !null {
			r.parent, err = v.hash(name)
			r.hasParent = err == nil
		}
	case "token_ids":
		v.tokens, err = v.tokenIDs(v.tokens)
		r.tokens, r.haveTokens = v.tokens, err == nil
	case "block_size":
		var n uint64
		n, err = v.optUint(name, math.MaxInt32)
		r.blockSize = int64(n)
	case "lora_name":
		var null bool
		if null, err = v.isNil(); err == nil && !null {
			var c byte
			if c, err = v.d.PeekCode(); err == nil {
				switch {
				case msgpcode.IsString(c):
					r.loraName, err = v.str()
				case isMap(c):
					// SGLang's BlockStoredWithMetadata (from 0.5.18,
					// python/sglang/srt/disaggregation/kv_events.py in
					// sgl-project/sglang) puts a map ({"cache_salt": ...,
					// "session_id": ...}) in this slot of the array form:
					// refusing it lost the whole batch and cleared the
					// worker at every salted store. kvidx hashes tokens
					// without the salt, as it does vLLM's extra_keys.
					err = v.skip()
				case isArray(c):
					// SGLang with --enable-kv-events-component-types
					// puts the stored block's KV components here
					// (component_types, labels such as "full", "swa",
					// "mamba"; sgl-project/sglang's kv-indexer bridge
					// reads this slot so): it was refused as a LoRA name,
					// losing the batch and clearing the worker.
					err = v.components()
				default:
					return decodeErr("lora_name: want a string, got code 0x%02x", c)
				}
			}
		}
	// medium and lora_id were skipped before kvidx read them: a value of
	// another type (an event class kvidx does not know may use the names
	// otherwise) reads as absent, and fails nothing.
	case "medium":
		var c byte
		if c, err = v.d.PeekCode(); err == nil {
			if msgpcode.IsString(c) {
				var m string
				m, err = v.str()
				r.offGPU = !strings.EqualFold(m, "GPU")
			} else {
				err = v.skip()
			}
		}
	case "group_idx":
		var c byte
		if c, err = v.d.PeekCode(); err == nil {
			switch {
			case isInt(c):
				r.group, err = v.uint(name, math.MaxInt64)
				r.hasGroup = err == nil
			case msgpcode.IsString(c) && r.typ == "BlockRemoved":
				// SGLang's component-aware removal names its KV
				// component in this slot (BlockRemovedWithComponentType,
				// python/sglang/srt/mem_cache/events.py; msgspec lays a
				// subclass's fields after its base's medium): a sliding
				// window's or Mamba's removal leaves the block's full
				// attention KV, which the index keeps.
				err = v.label()
			default:
				err = v.skip()
			}
		}
	case "kv_cache_spec_kind":
		var c byte
		if c, err = v.d.PeekCode(); err == nil {
			if msgpcode.IsString(c) {
				r.kind, err = v.str()
			} else {
				err = v.skip()
			}
		}
	case "component_types", "component_type":
		// SGLang's component labels by name (its map form): a list, or
		// one label.
		var c byte
		if c, err = v.d.PeekCode(); err == nil {
			switch {
			case isArray(c):
				err = v.components()
			case msgpcode.IsString(c):
				err = v.label()
			default:
				err = v.skip()
			}
		}
	case "lora_id":
		var c byte
		if c, err = v.d.PeekCode(); err == nil {
			if isInt(c) {
				r.loraID, err = v.uint(name, math.MaxInt64)
				r.hasLoraID = err == nil
			} else {
				err = v.skip()
			}
		}
	default: // anything newer
		err = v.skip()
	}
	if err != nil {
		return wrapErr(name, err)
	}
	return nil
}

// LoraIDName is the LoRA name that salts the blocks of an engine that names
// its LoRA adapter only by lora_id (vLLM before BlockStored carried
// lora_name): "lora_id:" and the id in decimal. A router's query matches
// them with that name as its lora_name.
func LoraIDName(id uint64) string { return "lora_id:" + strconv.FormatUint(id, 10) }

// maxGroups bounds the group_idx values a decoder remembers the kind of:
// a hybrid model has a handful of KV-cache groups.
const maxGroups = 64

// PartialGroups returns the KV-cache groups (bit i: group_idx i) whose
// stores named a kind that holds no whole prefix: their removals are
// skipped. A source records it, so that this outlives a restart.
func (v *VLLMDecoder) PartialGroups() uint64 { return v.partial }

// SetPartialGroups restores what PartialGroups returned.
func (v *VLLMDecoder) SetPartialGroups(groups uint64) { v.partial = groups }

// fullKind tells whether a kv_cache_spec_kind names a group whose blocks
// hold the whole prefix.
func fullKind(kind string) bool {
	switch kind {
	case "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// partialKind tells whether a kv_cache_spec_kind names a group whose blocks
// do not hold a whole prefix (a window, or a state).
func partialKind(kind string) bool {
	switch kind {
	case "sliding_window", "sliding_window_mla", "chunked_local_attention", "mamba":
		return true
	}
	return false
}

// components decodes SGLang's component_types, a list of KV component
// labels (null elements skipped), into v.ev.
func (v *VLLMDecoder) components() error {
	n, err := v.arrayLen()
	if err != nil {
		return err
	}
	r := &v.ev
	r.labelled = true
	for i := range n {
		c, err := v.d.PeekCode()
		if err != nil {
			return err
		}
		if !msgpcode.IsString(c) {
			if err := v.skip(); err != nil {
				return err
			}
			continue
		}
		if err := v.label(); err != nil {
			return fmt.Errorf("component_types[%d]: %w", i, err)
		}
	}
	return nil
}

// label decodes one SGLang KV component label into v.ev: the event is
// labelled, and about full attention if any of its labels names it.
func (v *VLLMDecoder) label() error {
	l, err := v.str()
	if err != nil {
		return err
	}
	v.ev.labelled = true
	v.ev.full = v.ev.full || isFullLabel(l)
	return nil
}

// isFullLabel tells whether an SGLang KV component label names full
// attention, whose blocks hold the whole prefix.
func isFullLabel(label string) bool { return strings.EqualFold(label, "full") }

// otherGroup tells whether r is a store or removal of a KV-cache group that
// is not a full-attention one.
func (r *rawEvent) otherGroup(partial uint64) bool {
	if r.typ != "BlockStored" && r.typ != "BlockRemoved" {
		return false
	}
	if r.labelled {
		return !r.full
	}
	if r.typ == "BlockStored" {
		if partialKind(r.kind) || r.windowStore {
			return true
		}
		if fullKind(r.kind) {
			return false
		}
	}
	return r.hasGroup && r.group < maxGroups && partial&(1<<r.group) != 0
}

// otherMedium tells whether r is a store or removal of another medium
// than the GPU.
func (r *rawEvent) otherMedium() bool {
	return r.offGPU && (r.typ == "BlockStored" || r.typ == "BlockRemoved")
}

// build turns v.ev into an engine event.
func (v *VLLMDecoder) build() (engine.Event, bool, error) {
	r := &v.ev
	var ev engine.Event
	switch r.typ {
	case "BlockStored":
		ev.Kind = engine.KindStored
		n := len(r.hashes)
		if r.blockSize <= 0 {
			return ev, false, decodeErr("BlockStored: block_size %d", r.blockSize)
		}
		// Full blocks only, as kvidx hashes any token list: a trailing
		// partial block is dropped, and what is left must be the blocks.
		if full := int64(len(r.tokens)) / r.blockSize; full != int64(n) {
			return ev, false, decodeErr("BlockStored: %d token_ids are %d full blocks of %d, for %d block hashes", len(r.tokens), full, r.blockSize, n)
		}
		lora := r.loraName
		if lora == "" && r.hasLoraID {
			// An engine from before lora_name names its LoRA by id only:
			// its blocks must not pass for the base model's.
			lora = LoraIDName(r.loraID)
		}
		local := engine.LocalHashes(make([]uint64, 0, n), r.tokens, int(r.blockSize), lora)
		ev.Blocks = make([]engine.Block, n)
		for i := range n {
			ev.Blocks[i] = engine.Block{BlockHash: r.hashes[i], TokensHash: local[i]}
		}
		ev.HasParent, ev.ParentHash = r.hasParent, r.parent
	case "BlockRemoved":
		ev.Kind = engine.KindRemoved
		ev.BlockHashes = append([]uint64(nil), r.hashes...)
	case "AllBlocksCleared":
		ev.Kind = engine.KindCleared
	default:
		return ev, false, nil
	}
	return ev, true, nil
}
