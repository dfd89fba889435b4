package snapshot

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// A holder's first block hash is left out of the file exactly when it
// equals the place's seq (format version 2), and comes back in its place.
func TestHolderSeqFirst(t *testing.T) {
	const th, seq = 5, 5 // a chain root's seq is its tokens hash
	one := func(hashes ...uint64) []engine.HolderRecord {
		return []engine.HolderRecord{{Worker: engine.WorkerKey{WorkerID: 1}, BlockHashes: hashes}}
	}
	widx := func(*engine.HolderRecord) (uint32, bool) { return 0, true }
	cases := []struct {
		name    string
		holders []engine.HolderRecord
		omitted bool
	}{
		{"the seq", one(seq), true},
		{"another hash", one(77), false},
		{"the seq, then another", one(seq, 78), true},
		{"another, then the seq", one(79, seq), false},
		{"two others", one(80, 81), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e encoder
			rec := engine.PlaceRecord{ID: 1, Position: 0, TokensHash: th, Seq: seq, Holders: c.holders}
			if err := e.add(&rec, 1, 0, widx); err != nil {
				t.Fatal(err)
			}
			// Position, parent, tokens hash, seq, holder count, holder,
			// [count], hashes.
			want := 1 + 1 + 16 + 1 + 1 + 8*len(c.holders[0].BlockHashes)
			if len(c.holders[0].BlockHashes) > 1 {
				want++
			}
			if c.omitted {
				want -= 8
			}
			if len(e.body) != want {
				t.Fatalf("body of %d bytes, want %d", len(e.body), want)
			}
		})
	}

	// The same cases in one index, written and read back.
	ix := engine.New()
	w := func(id uint64) engine.WorkerKey { return engine.WorkerKey{WorkerID: id} }
	stored := func(k engine.WorkerKey, bh uint64) engine.Event {
		return engine.Event{Worker: k, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: bh, TokensHash: th}}}
	}
	apply(ix, []engine.Event{
		stored(w(1), seq), stored(w(2), 77), stored(w(3), seq), stored(w(3), 78), stored(w(4), 79), stored(w(4), seq),
		stored(w(5), 80), stored(w(5), 81),
		// A chain named by the router's own seqs, as Dynamo's engines name it.
		{Worker: w(1), Kind: engine.KindStored, HasParent: true, ParentHash: seq, Blocks: []engine.Block{{BlockHash: engine.NextSeq(seq, 6), TokensHash: 6}}},
	})
	var want []engine.PlaceRecord
	ix.Freeze().Places(func(rec *engine.PlaceRecord) bool {
		want = append(want, cloneRecord(rec))
		return true
	})
	p := writeSnap(t, t.TempDir(), ix, 1)
	if got := scanAll(t, p, 0, math.MaxUint32, nil); !slices.EqualFunc(got, want, sameRecord) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
	}
	got, m := loadSnap(t, p)
	if m.Version != FormatVersion {
		t.Fatalf("version %d", m.Version)
	}
	sameIndex(t, got, ix, [][]uint64{{5}, {5, 6}, {6}})
}

// Files of format version 1 (the fixture's snapshots were written by it)
// still read and load, and rewritten as the current version hold the same
// places.
func TestReadsVersion1(t *testing.T) {
	const v1 = "../testdata/datadir-small/snapshots/snapshot-00000000000000000050.bolt"
	old, m := loadSnap(t, v1)
	if m.Version != 1 {
		t.Fatalf("fixture is version %d, want 1 (rebuilt by a newer kvidx? keep a version 1 file for this test)", m.Version)
	}
	if m.Stats.HolderBlocks == 0 {
		t.Fatal("fixture snapshot is empty")
	}
	var want []engine.PlaceRecord
	f := old.Freeze()
	f.Places(func(rec *engine.PlaceRecord) bool {
		want = append(want, cloneRecord(rec))
		return true
	})
	p := writeSnap(t, t.TempDir(), old, m.Index)
	got := scanAll(t, p, 0, math.MaxUint32, nil)
	if !slices.EqualFunc(got, want, sameRecord) {
		t.Fatalf("version %d file\n%+v\nwant\n%+v", FormatVersion, got, want)
	}
	// A loaded index keeps parent links only where a worker's kids are
	// counted, so compare the rest with the version 1 file.
	noParent := func(a, b engine.PlaceRecord) bool { a.Parent, b.Parent = 0, 0; return sameRecord(a, b) }
	if v1recs := scanAll(t, v1, 0, math.MaxUint32, nil); !slices.EqualFunc(got, v1recs, noParent) {
		t.Fatalf("version %d file\n%+v\nversion 1 file\n%+v", FormatVersion, got, v1recs)
	}
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Verify(t.Context()); err != nil {
		t.Fatal(err)
	}
	loaded, _ := loadSnap(t, p)
	sameIndex(t, loaded, old, [][]uint64{{100}, {100, 101}, {101, 102, 103}})
}

func cloneRecord(rec *engine.PlaceRecord) engine.PlaceRecord {
	c := *rec
	c.Holders = nil
	for _, h := range rec.Holders {
		c.Holders = append(c.Holders, engine.HolderRecord{Worker: h.Worker, BlockHashes: slices.Clone(h.BlockHashes)})
	}
	return c
}

func sameRecord(a, b engine.PlaceRecord) bool {
	return a.ID == b.ID && a.Parent == b.Parent && a.Position == b.Position && a.TokensHash == b.TokensHash && a.Seq == b.Seq &&
		slices.EqualFunc(a.Holders, b.Holders, func(x, y engine.HolderRecord) bool {
			return x.Worker == y.Worker && slices.Equal(x.BlockHashes, y.BlockHashes)
		})
}

// Damaged chunks are refused without a panic and without allocating what
// their header claims: a worker-index delta that would wrap around (version
// 1 shifts it by one bit only), and a header announcing far more
// holder-blocks and places than the data holds.
func TestDecoderHostileChunks(t *testing.T) {
	workers := []engine.WorkerKey{{WorkerID: 1}, {WorkerID: 2}}
	le := func(x uint64) []byte { return binary.LittleEndian.AppendUint64(nil, x) }
	value := func(h chunkHeader, body []byte) []byte {
		return appendSnappyStored(appendChunkHeader(nil, h), body)
	}
	var wrap []byte
	wrap = binary.AppendUvarint(wrap, 0) // position delta
	wrap = binary.AppendUvarint(wrap, 0) // no parent
	wrap = append(append(wrap, le(9)...), le(9)...)
	wrap = binary.AppendUvarint(wrap, 2)                   // two holders
	wrap = append(binary.AppendUvarint(wrap, 0), le(1)...) // worker 0
	wrap = append(binary.AppendUvarint(wrap, math.MaxUint64-1), le(2)...)
	zeros := make([]byte, 1<<20)
	cases := []struct {
		name    string
		version uint32
		v       []byte
	}{
		{"wrapping worker delta, version 1", 1, value(chunkHeader{firstOrd: 1, places: 1, holderBlocks: 2}, wrap)},
		{"wrapping worker delta, version 2", 2, value(chunkHeader{firstOrd: 1, places: 1, holderBlocks: 2}, wrap)},
		{"inflated counts", 2, value(chunkHeader{firstOrd: 1, places: 1 << 20, holderBlocks: 1 << 20}, zeros)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, sel := range [][]bool{nil, {true, false}} {
				d := &decoder{version: c.version, workers: workers, sel: sel}
				var out engine.PlaceBatch
				if err := d.chunk(chunkKey(0, 0), c.v, 0, math.MaxUint32, &out); err == nil {
					t.Fatalf("accepted: %+v", out)
				}
				if cap(out.Hashes) > len(c.v)/8+64 || cap(out.Holders) > len(c.v)/8+64 || cap(out.Places) > len(c.v)/minPlaceBytes+64 {
					t.Fatalf("allocated %d hashes, %d holders, %d places for a %d-byte chunk", cap(out.Hashes), cap(out.Holders), cap(out.Places), len(c.v))
				}
			}
		})
	}
}
