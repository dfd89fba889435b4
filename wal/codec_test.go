package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/kvidx/kvidx/engine"
)

// sampleEvents returns events of every kind, with every optional field.
func sampleEvents() []engine.Event {
	return []engine.Event{
		{Worker: engine.WorkerKey{WorkerID: 1}, EventID: 1, Kind: engine.KindStored,
			Blocks: []engine.Block{{BlockHash: 0xdeadbeefcafebabe, TokensHash: 1}, {BlockHash: 2, TokensHash: math.MaxUint64}}},
		{Worker: engine.WorkerKey{WorkerID: math.MaxUint64, DPRank: math.MaxUint32}, EventID: math.MaxUint64, Kind: engine.KindStored,
			HasParent: true, ParentHash: 0x0123456789abcdef, HasStartPosition: true, StartPosition: engine.MaxPosition,
			Blocks: []engine.Block{{BlockHash: 3, TokensHash: 4}}},
		{Worker: engine.WorkerKey{WorkerID: 7, DPRank: 3}, EventID: 9, Kind: engine.KindStored, HasStartPosition: true, StartPosition: 0,
			Blocks: []engine.Block{{BlockHash: 5, TokensHash: 6}}},
		{Worker: engine.WorkerKey{WorkerID: 7, DPRank: 3}, EventID: 10, Kind: engine.KindRemoved, BlockHashes: []uint64{5, 0, math.MaxUint64}},
		{Worker: engine.WorkerKey{WorkerID: 7, DPRank: 3}, EventID: 11, Kind: engine.KindCleared},
		{Worker: engine.WorkerKey{WorkerID: 7}, EventID: 12, Kind: engine.KindWorkerRemoved},
		{Worker: engine.WorkerKey{WorkerID: 8}, Kind: engine.EventKind(200)}, // unknown kinds survive: the engine rejects them
		chainedEvent(false), chainedEvent(true),
	}
}

// chainedEvent is a Stored event named as Dynamo engines name blocks: by the
// router's own seq chain, which the codec stores without block hashes.
func chainedEvent(withParent bool) engine.Event {
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 9}, EventID: 13, Kind: engine.KindStored}
	prev := uint64(0)
	if withParent {
		ev.HasParent, ev.ParentHash, prev = true, 0xfeedface, 0xfeedface
	}
	for i, th := range []uint64{11, 12, 13} {
		bh := th
		if i > 0 || withParent {
			bh = engine.NextSeq(prev, th)
		}
		ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: bh, TokensHash: th})
		prev = bh
	}
	return ev
}

func TestChainedEventsStoreTokensHashesOnly(t *testing.T) {
	for _, withParent := range []bool{false, true} {
		ev := chainedEvent(withParent)
		if !chained(&ev) {
			t.Fatalf("parent %v: the event does not follow the chain", withParent)
		}
		plain := ev
		plain.Blocks = append([]engine.Block(nil), ev.Blocks...)
		plain.Blocks[2].BlockHash++
		if chained(&plain) {
			t.Fatal("a block off the chain was taken as chained")
		}
		a, b := appendEvent(nil, &ev), appendEvent(nil, &plain)
		if len(b)-len(a) != 8*len(ev.Blocks) {
			t.Fatalf("chained encoding %d bytes, plain %d: want 8 bytes a block saved", len(a), len(b))
		}
	}
}

// normalize makes empty slices nil so decoded events compare equal.
func normalize(evs []engine.Event) []engine.Event {
	out := make([]engine.Event, len(evs))
	for i, ev := range evs {
		if len(ev.Blocks) == 0 {
			ev.Blocks = nil
		}
		if len(ev.BlockHashes) == 0 {
			ev.BlockHashes = nil
		}
		out[i] = ev
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func TestCodecRoundtrip(t *testing.T) {
	all := sampleEvents()
	tests := []struct {
		name      string
		events    []engine.Event
		positions []Position
	}{
		{"empty", nil, nil},
		{"positions only", nil, []Position{{"kafka/p0", 42}, {"", 0}, {"zmq", math.MaxUint64}}},
		{"stored", all[:1], nil},
		{"stored parent start", all[1:2], []Position{{"s", 1}}},
		{"stored start zero", all[2:3], nil},
		{"removed", all[3:4], nil},
		{"cleared", all[4:5], nil},
		{"worker removed", all[5:6], nil},
		{"unknown kind", all[6:7], nil},
		{"all", all, []Position{{"a", 1}, {"b", 2}}},
		{"empty slices", []engine.Event{{Kind: engine.KindStored, Blocks: []engine.Block{}, BlockHashes: []uint64{}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := frame(nil, 9, encodeBatch(nil, tt.events, tt.positions))
			evs, pos, err := decodeEntry(p, 9)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(evs, normalize(tt.events)) {
				t.Fatalf("events:\n got %+v\nwant %+v", evs, tt.events)
			}
			if len(tt.positions) == 0 {
				tt.positions = nil
			}
			if !reflect.DeepEqual(pos, tt.positions) {
				t.Fatalf("positions: got %+v want %+v", pos, tt.positions)
			}
		})
	}
}

func TestCheckFrame(t *testing.T) {
	good := frame(nil, 1, encodeBatch(nil, sampleEvents(), nil))
	if err := checkFrame(good); err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"zero length": {},
		"header only": good[:frameHeader],
		"version":     append([]byte{3}, good[1:]...),
		"truncated":   good[:len(good)-1],
		"zeros":       make([]byte, 16),
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		bad["flip"+string(rune('a'+i%26))+string(rune('0'+i/26%10))] = b
	}
	for name, p := range bad {
		if err := checkFrame(p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: checkFrame = %v, want ErrCorrupt", name, err)
		}
		if _, _, err := decodeEntry(p, 1); err == nil {
			t.Errorf("%s: decodeEntry accepted a bad frame", name)
		}
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	good := encodeBatch(nil, sampleEvents(), []Position{{"x", 1}})
	for n := range len(good) {
		if _, _, err := decodeBatch(good[:n]); err == nil {
			t.Fatalf("prefix of %d/%d bytes decoded", n, len(good))
		}
	}
	if _, _, err := decodeBatch(append(bytes.Clone(good), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	// A huge count must fail fast, not allocate.
	huge := []byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	if _, _, err := decodeBatch(huge); err == nil {
		t.Fatal("huge event count accepted")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(nil, sampleEvents(), []Position{{"src", 7}}))
	f.Add(frame(nil, 1, encodeBatch(nil, sampleEvents(), nil)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeEntry(data, 1) // framed path: must not panic
		evs, pos, err := decodeBatch(data)
		framed := frame(nil, 1, data)
		evs2, pos2, err2 := decodeEntry(framed, 1)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("raw and framed decoding disagree: %v vs %v", err, err2)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(evs, evs2) || !reflect.DeepEqual(pos, pos2) {
			t.Fatal("framed decoding differs")
		}
		// Whatever decodes re-encodes to something that decodes the same.
		evs3, pos3, err := decodeBatch(encodeBatch(nil, evs, pos))
		if err != nil {
			t.Fatalf("re-encoded batch fails: %v", err)
		}
		if !reflect.DeepEqual(normalize(evs3), normalize(evs)) || !reflect.DeepEqual(pos3, pos) {
			t.Fatal("re-encoded batch decodes differently")
		}
	})
}

// TestDecodeEntryDeclaredLength: an entry with a valid CRC whose snappy
// header declares far more than its bytes can decode to is refused before
// snappy allocates the declared length.
func TestDecodeEntryDeclaredLength(t *testing.T) {
	for _, declared := range []uint64{1 << 20, 1 << 29} {
		z := append(binary.AppendUvarint(nil, declared), 0, 0, 0)
		p := make([]byte, frameHeader, frameHeader+len(z))
		p[0] = formatVersion1
		p = append(p, z...)
		binary.LittleEndian.PutUint32(p[1:frameHeader], crc32.Checksum(z, castagnoli))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := decodeEntry(p, 1)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "too large") {
			t.Fatalf("declared %d: %v, want a refusal", declared, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
			t.Fatalf("declared %d: %d bytes allocated before the refusal", declared, grew)
		}
	}
}

// A version 2 frame carries its entry's index under the CRC: read at any
// other index it is refused (a segment file renamed to a lower index was
// replayed as the entries it is not: acknowledged entries skipped, a
// removed block revived). Found by review.
func TestFrameIndex(t *testing.T) {
	raw := encodeBatch(nil, sampleEvents(), []Position{{"s", 3}})
	p := frame(nil, 41, raw)
	if _, _, err := decodeEntry(p, 41); err != nil {
		t.Fatal(err)
	}
	for _, at := range []uint64{1, 40, 42, 1 << 40} {
		if _, _, err := decodeEntry(p, at); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "is entry 41") {
			t.Fatalf("entry 41 read as %d: %v", at, err)
		}
	}
	// Version 1 frames (logs written before) carry no index and still read.
	z := snappy.Encode(nil, raw)
	v1 := append([]byte{formatVersion1, 0, 0, 0, 0}, z...)
	binary.LittleEndian.PutUint32(v1[1:frameHeader], crc32.Checksum(z, castagnoli))
	evs, pos, err := decodeEntry(v1, 7)
	if err != nil || !reflect.DeepEqual(pos, []Position{{"s", 3}}) || len(evs) != len(sampleEvents()) {
		t.Fatalf("version 1 frame: %v %v %v", evs, pos, err)
	}
	// A version 2 frame whose index is 0, or that ends after its index,
	// is damaged whatever its CRC says.
	for name, rest := range map[string][]byte{"index 0": append([]byte{0}, z...), "index only": {5}} {
		b := append([]byte{formatVersion, 0, 0, 0, 0}, rest...)
		binary.LittleEndian.PutUint32(b[1:frameHeader], crc32.Checksum(b[frameHeader:], castagnoli))
		if err := checkFrame(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
