package eventjson

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kvidx/kvidx/engine"
)

var (
	errMissing   = errors.New("required field missing")
	errDuplicate = errors.New("duplicate field")
)

// ErrOtherTier is wrapped by the error for an event of a storage_tier other
// than "device" or a residency_domain other than "worker" (Dynamo's
// RouterEvent, ai-dynamo/dynamo lib/kv-router/src/protocols.rs): kvidx
// indexes what a worker holds on its GPU, and such an event names blocks of
// a host, disk or shared tier under the same block hashes, so applying it
// would store or remove the worker's GPU blocks. A clear names no blocks:
// Dynamo clears the worker's device blocks for one of any storage_tier, so
// only its residency_domain is checked.
var ErrOtherTier = errors.New("not the worker's device tier")

// firstTime marks field as seen in an object, or fails if it was already:
// a repeated known key is refused rather than silently taking one value.
func firstTime(seen *bool, field string) error {
	if *seen {
		return inField(field, errDuplicate)
	}
	*seen = true
	return nil
}

// Decoder decodes events one at a time, reusing its buffers: decoding a stream
// through one Decoder allocates nothing per event once the buffers have grown
// to the largest event. The zero Decoder is ready to use; it is not safe for
// concurrent use.
type Decoder struct {
	s      scanner
	blocks []engine.Block
	hashes []uint64
}

// Decode decodes one event (a JSON object, optionally surrounded by
// whitespace) into ev, overwriting every field of ev. ev.Blocks and
// ev.BlockHashes share the Decoder's buffers: they are valid until the next
// call to Decode, so a caller that keeps an event beyond that must copy
// them (applying it to an index and moving on is fine: the index copies what
// it stores). Empty lists decode as nil. On error ev is left zero.
func (d *Decoder) Decode(data []byte, ev *engine.Event) error {
	d.s = scanner{data: data, scratch: d.s.scratch[:0]}
	d.blocks, d.hashes = d.blocks[:0], d.hashes[:0]
	*ev = engine.Event{}
	err := decodeEvent(&d.s, ev, &d.blocks, &d.hashes)
	if err == nil {
		err = d.s.end()
	}
	if err != nil {
		*ev = engine.Event{}
		return err
	}
	ev.Blocks, ev.BlockHashes = nilIfEmpty(d.blocks), nilIfEmpty(d.hashes)
	return nil
}

// DecodeEvent decodes one event (a JSON object, optionally surrounded by
// whitespace). The event's slices are freshly allocated and owned by the
// caller; empty lists decode as nil. Use a [Decoder] to decode streams.
func DecodeEvent(data []byte) (engine.Event, error) {
	var d Decoder
	var ev engine.Event
	if err := d.Decode(data, &ev); err != nil {
		return engine.Event{}, err
	}
	return ev, nil
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// decodeEvent decodes the RouterEvent object at the cursor into ev, appending
// its blocks and removed hashes to *blocks and *hashes rather than setting
// ev.Blocks and ev.BlockHashes: the caller decides who owns the memory (one
// reused buffer per stream, or one shared buffer per batch).
func decodeEvent(s *scanner, ev *engine.Event, blocks *[]engine.Block, hashes *[]uint64) error {
	if err := s.beginObject(); err != nil {
		return err
	}
	var haveWorker, haveEvent, haveTier, haveDomain bool
	var otherTier, otherDomain error
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "worker_id":
			if err := firstTime(&haveWorker, "worker_id"); err != nil {
				return err
			}
			if ev.Worker.WorkerID, err = s.uint(math.MaxUint64); err != nil {
				return inField("worker_id", err)
			}
		case "event":
			if err := firstTime(&haveEvent, "event"); err != nil {
				return err
			}
			if err := decodeInner(s, ev, blocks, hashes); err != nil {
				return inField("event", err)
			}
		case "storage_tier":
			if err := firstTime(&haveTier, "storage_tier"); err != nil {
				return err
			}
			if err := otherThan(s, "storage_tier", "device", &otherTier); err != nil {
				return inField("storage_tier", err)
			}
		case "residency_domain":
			if err := firstTime(&haveDomain, "residency_domain"); err != nil {
				return err
			}
			if err := otherThan(s, "residency_domain", "worker", &otherDomain); err != nil {
				return inField("residency_domain", err)
			}
		default:
			if err := s.skipUnknown(key); err != nil {
				return err
			}
		}
	}
	switch {
	case !haveWorker:
		return inField("worker_id", errMissing)
	case !haveEvent:
		return inField("event", errMissing)
	// Refused whole, after the rest decoded: the caller counts it like
	// any other undecodable event.
	case otherDomain != nil:
		return otherDomain
	case otherTier != nil && ev.Kind != engine.KindCleared:
		// A clear names no blocks and so has no tier: Dynamo resets the
		// worker's residency in every tier, its device blocks too, for
		// a clear of the worker's domain (or of no domain) whatever its
		// storage_tier.
		return otherTier
	}
	return nil
}

// otherThan reads field's string value (null: absent) and, when it is not
// want, sets *other to an error naming it.
func otherThan(s *scanner, field, want string, other *error) error {
	if isNull, err := s.null(); err != nil || isNull {
		return err
	}
	v, err := s.str()
	if err != nil {
		return err
	}
	if string(v) != want {
		*other = inField(field, fmt.Errorf("%q: %w", clip(v), ErrOtherTier))
	}
	return nil
}

// cmpErr returns err if it is not nil, else alt: for "consume a null, then
// complain that it is there" sequences.
func cmpErr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// decodeInner decodes the KvCacheEvent object: event_id, dp_rank and data.
func decodeInner(s *scanner, ev *engine.Event, blocks *[]engine.Block, hashes *[]uint64) error {
	if err := s.beginRequiredObject(); err != nil {
		return err
	}
	var haveID, haveRank, haveData bool
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "event_id":
			if err := firstTime(&haveID, "event_id"); err != nil {
				return err
			}
			if ev.EventID, err = optUint(s, math.MaxUint64); err != nil {
				return inField("event_id", err)
			}
		case "dp_rank":
			if err := firstTime(&haveRank, "dp_rank"); err != nil {
				return err
			}
			r, err := optUint(s, math.MaxUint32)
			if err != nil {
				return inField("dp_rank", err)
			}
			ev.Worker.DPRank = uint32(r)
		case "data":
			if err := firstTime(&haveData, "data"); err != nil {
				return err
			}
			if err := decodeData(s, ev, blocks, hashes); err != nil {
				return inField("data", err)
			}
		default:
			if err := s.skipUnknown(key); err != nil {
				return err
			}
		}
	}
	if !haveData {
		return inField("data", errMissing)
	}
	return nil
}

// optUint reads an optional unsigned integer: null reads as 0.
func optUint(s *scanner, max uint64) (uint64, error) {
	v, err := s.uint(max)
	if err == errNull {
		return 0, nil
	}
	return v, err
}

// decodeData decodes KvCacheEventData, serde's externally tagged enum: the
// unit variants are bare strings, the others objects with exactly one key.
func decodeData(s *scanner, ev *engine.Event, blocks *[]engine.Block, hashes *[]uint64) error {
	switch s.peek() {
	case '"':
		name, err := s.str()
		if err != nil {
			return err
		}
		switch string(name) {
		case "cleared":
			ev.Kind = engine.KindCleared
		case "worker_removed":
			ev.Kind = engine.KindWorkerRemoved
		default:
			return fmt.Errorf("unknown kind %q", clip(name))
		}
		return nil
	case '{':
	case 'n':
		return cmpErr(s.literal("null"), errNull)
	default:
		return s.mismatch("a string or an object")
	}
	s.pos++
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if ev.Kind != 0 {
			switch k := string(key); {
			case k == ev.Kind.String():
				return inField(k, errDuplicate)
			case k == "stored" || k == "removed":
				return errors.New(`both "stored" and "removed" given, want exactly one`)
			}
			return fmt.Errorf("unexpected second key %q, want exactly one of \"stored\", \"removed\"", clip(key))
		}
		switch string(key) {
		case "stored":
			ev.Kind = engine.KindStored
			err = inField("stored", decodeStored(s, ev, blocks))
		case "removed":
			ev.Kind = engine.KindRemoved
			err = inField("removed", decodeRemoved(s, hashes))
		default:
			return fmt.Errorf("unknown kind %q", clip(key))
		}
		if err != nil {
			return err
		}
	}
	if ev.Kind == 0 {
		return errors.New(`empty object, want exactly one of "stored", "removed"`)
	}
	return nil
}

// decodeStored decodes KvCacheStoreData.
func decodeStored(s *scanner, ev *engine.Event, blocks *[]engine.Block) error {
	if err := s.beginRequiredObject(); err != nil {
		return err
	}
	var haveParent, haveStart, haveBlocks bool
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "parent_hash":
			if err := firstTime(&haveParent, "parent_hash"); err != nil {
				return err
			}
			if ev.ParentHash, ev.HasParent, err = nullableUint(s); err != nil {
				return inField("parent_hash", err)
			}
		case "start_position":
			if err := firstTime(&haveStart, "start_position"); err != nil {
				return err
			}
			if ev.StartPosition, ev.HasStartPosition, err = nullableUint(s); err != nil {
				return inField("start_position", err)
			}
		case "blocks":
			if err := firstTime(&haveBlocks, "blocks"); err != nil {
				return err
			}
			if err := decodeBlocks(s, blocks); err != nil {
				return inField("blocks", err)
			}
		default:
			if err := s.skipUnknown(key); err != nil {
				return err
			}
		}
	}
	if !haveBlocks {
		return inField("blocks", errMissing)
	}
	return nil
}

// nullableUint reads a uint64 that may be null (ok=false).
func nullableUint(s *scanner) (v uint64, ok bool, err error) {
	v, err = s.uint(math.MaxUint64)
	if err == errNull {
		return 0, false, nil
	}
	return v, err == nil, err
}

// decodeBlocks appends a non-empty array of KvCacheStoredBlockData to *blocks.
// It is the hot loop of ingestion: keys are matched without allocating and
// numbers are read straight into the engine's type.
func decodeBlocks(s *scanner, blocks *[]engine.Block) error {
	if err := s.beginRequiredArray(); err != nil {
		return err
	}
	n := 0
	for first := true; ; n++ {
		more, err := s.element(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		var b engine.Block
		if err := decodeBlock(s, &b); err != nil {
			return inElement(n, err)
		}
		*blocks = append(*blocks, b)
	}
	if n == 0 {
		return errors.New("empty array, want at least one block")
	}
	return nil
}

func decodeBlock(s *scanner, b *engine.Block) error {
	if err := s.beginRequiredObject(); err != nil {
		return err
	}
	var haveBlock, haveTokens bool
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "block_hash":
			if err := firstTime(&haveBlock, "block_hash"); err != nil {
				return err
			}
			if b.BlockHash, err = s.uint(math.MaxUint64); err != nil {
				return inField("block_hash", err)
			}
		case "tokens_hash":
			if err := firstTime(&haveTokens, "tokens_hash"); err != nil {
				return err
			}
			if b.TokensHash, err = s.uint(math.MaxUint64); err != nil {
				return inField("tokens_hash", err)
			}
		default:
			if err := s.skipUnknown(key); err != nil {
				return err
			}
		}
	}
	switch {
	case !haveBlock:
		return inField("block_hash", errMissing)
	case !haveTokens:
		return inField("tokens_hash", errMissing)
	}
	return nil
}

// decodeRemoved decodes KvCacheRemoveData, appending its hashes to *hashes.
func decodeRemoved(s *scanner, hashes *[]uint64) error {
	if err := s.beginRequiredObject(); err != nil {
		return err
	}
	var haveHashes bool
	for first := true; ; {
		key, more, err := s.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "block_hashes":
			if err := firstTime(&haveHashes, "block_hashes"); err != nil {
				return err
			}
			if *hashes, err = appendUints(s, *hashes, math.MaxUint64); err != nil {
				return inField("block_hashes", err)
			}
		default:
			if err := s.skipUnknown(key); err != nil {
				return err
			}
		}
	}
	if !haveHashes {
		return inField("block_hashes", errMissing)
	}
	return nil
}

// appendUints appends a JSON array of unsigned integers no larger than max
// (possibly empty, never null) to dst.
func appendUints(s *scanner, dst []uint64, max uint64) ([]uint64, error) {
	if err := s.beginRequiredArray(); err != nil {
		return dst, err
	}
	// Size dst once: an array of numbers ends at the next ']' and has a
	// comma between elements (a malformed one only makes a poor guess).
	if end := bytes.IndexByte(s.data[s.pos:], ']'); end > 0 {
		dst = slices.Grow(dst, bytes.Count(s.data[s.pos:s.pos+end], []byte{','})+1)
	}
	for first, i := true, 0; ; i++ {
		more, err := s.element(&first)
		if err != nil {
			return dst, err
		}
		if !more {
			return dst, nil
		}
		v, err := s.uint(max)
		if err != nil {
			return dst, inElement(i, err)
		}
		dst = append(dst, v)
	}
}
