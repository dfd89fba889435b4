package ingest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
)

// mp builds msgpack bytes by hand with the low-level encoder.
type mp struct {
	buf bytes.Buffer
	e   *msgpack.Encoder
}

func newMP() *mp {
	m := &mp{}
	m.e = msgpack.NewEncoder(&m.buf)
	return m
}

func (m *mp) arr(n int) *mp     { must(m.e.EncodeArrayLen(n)); return m }
func (m *mp) mapl(n int) *mp    { must(m.e.EncodeMapLen(n)); return m }
func (m *mp) str(s string) *mp  { must(m.e.EncodeString(s)); return m }
func (m *mp) u(n uint64) *mp    { must(m.e.EncodeUint(n)); return m }
func (m *mp) i(n int64) *mp     { must(m.e.EncodeInt(n)); return m }
func (m *mp) bin(b []byte) *mp  { must(m.e.EncodeBytes(b)); return m }
func (m *mp) null() *mp         { must(m.e.EncodeNil()); return m }
func (m *mp) f(x float64) *mp   { must(m.e.EncodeFloat64(x)); return m }
func (m *mp) raw(b ...byte) *mp { m.buf.Write(b); return m }
func (m *mp) bytes() []byte     { return bytes.Clone(m.buf.Bytes()) }
func (m *mp) us(ns ...uint64) *mp {
	m.arr(len(ns))
	for _, n := range ns {
		m.u(n)
	}
	return m
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func tokens(n, from int) []uint64 {
	t := make([]uint64, n)
	for i := range t {
		t[i] = uint64(from + i)
	}
	return t
}

func local(tok []uint64, bs int, lora string) []uint64 {
	t := make([]uint32, len(tok))
	for i, v := range tok {
		t[i] = uint32(v)
	}
	return engine.LocalHashes(nil, t, bs, lora)
}

func TestDecodeArrayForm(t *testing.T) {
	tok := tokens(8, 1)
	m := newMP().arr(3).f(1718.5).arr(4)
	// BlockStored, array form, no parent, hashes as uint64, all fields.
	m.arr(8).str("BlockStored").us(11, 1<<63+5).null().us(tok...).u(4).null().str("GPU").null()
	// BlockStored with a negative int64 parent and a bytes hash, LoRA, no medium (null), and an extra unknown trailing field.
	h := []byte{0xde, 0xad, 1, 2, 3, 4, 5, 6, 7, 8}
	m.arr(9).str("BlockStored").arr(1).bin(h).i(-2).us(tokens(4, 100)...).u(4).u(3).null().str("my-lora").str("future")
	// BlockRemoved with a negative hash and medium.
	m.arr(3).str("BlockRemoved").arr(2).i(-1).u(11).str("GPU")
	m.arr(1).str("AllBlocksCleared")
	m.u(2) // data_parallel_rank
	b, err := new(VLLMDecoder).Decode(m.bytes(), 7)
	if err != nil {
		t.Fatal(err)
	}
	w := engine.WorkerKey{WorkerID: 7, DPRank: 2}
	l := local(tok, 4, "")
	l2 := local(tokens(4, 100), 4, "my-lora")
	want := []engine.Event{
		{Worker: w, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: 11, TokensHash: l[0]}, {BlockHash: 1<<63 + 5, TokensHash: l[1]}}},
		{Worker: w, Kind: engine.KindStored, HasParent: true, ParentHash: uint64(1<<64 - 2), Blocks: []engine.Block{{BlockHash: 0x0102030405060708, TokensHash: l2[0]}}},
		{Worker: w, Kind: engine.KindRemoved, BlockHashes: []uint64{1<<64 - 1, 11}},
		{Worker: w, Kind: engine.KindCleared},
	}
	if b.DPRank != 2 || !reflect.DeepEqual(b.Events, want) {
		t.Fatalf("got %+v\nwant %+v", b.Events, want)
	}
	if l2[0] == local(tokens(4, 100), 4, "")[0] {
		t.Fatal("lora salt ignored")
	}
}

func TestDecodeMapForm(t *testing.T) {
	tok := tokens(4, 9)
	m := newMP().mapl(4).str("events").arr(3)
	// type key not first, unknown key, missing lora fields.
	m.mapl(6).str("block_hashes").arr(1).i(-3).str("token_ids").us(tok...).str("type").str("BlockStored").
		str("block_size").u(4).str("parent_block_hash").bin([]byte{1, 2}).str("extra").arr(2).mapl(1).str("x").u(1).null()
	m.mapl(3).str("type").str("BlockRemoved").str("block_hashes").arr(1).bin(bytes.Repeat([]byte{0xff}, 32)).str("medium").null()
	m.mapl(1).str("type").str("AllBlocksCleared")
	m.str("ts").f(1.5).str("data_parallel_rank").null().str("other").str("x")
	b, err := new(VLLMDecoder).Decode(m.bytes(), 3)
	if err != nil {
		t.Fatal(err)
	}
	w := engine.WorkerKey{WorkerID: 3}
	want := []engine.Event{
		{Worker: w, Kind: engine.KindStored, HasParent: true, ParentHash: 0x0102, Blocks: []engine.Block{{BlockHash: uint64(1<<64 - 3), TokensHash: local(tok, 4, "")[0]}}},
		{Worker: w, Kind: engine.KindRemoved, BlockHashes: []uint64{1<<64 - 1}},
		{Worker: w, Kind: engine.KindCleared},
	}
	if !reflect.DeepEqual(b.Events, want) {
		t.Fatalf("got %+v\nwant %+v", b.Events, want)
	}
}

func TestDecodeShortArrayAndUnknown(t *testing.T) {
	// Batch of 2 elements (no rank), an unknown event class, BlockStored without lora fields.
	m := newMP().arr(2).u(5).arr(2)
	m.arr(2).str("FutureEvent").u(1)
	m.arr(5).str("BlockStored").us(1).u(9).us(1, 2).u(2)
	b, err := new(VLLMDecoder).Decode(m.bytes(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Unknown != 1 || len(b.Events) != 1 || b.Events[0].ParentHash != 9 || !b.Events[0].HasParent || b.DPRank != 0 {
		t.Fatalf("%+v", b)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := map[string][]byte{
		"empty":          nil,
		"scalar":         newMP().u(1).bytes(),
		"short batch":    newMP().arr(1).u(1).bytes(),
		"events scalar":  newMP().arr(3).u(1).u(2).u(0).bytes(),
		"no events":      newMP().mapl(1).str("ts").u(1).bytes(),
		"trailing":       newMP().arr(2).u(1).arr(0).u(1).bytes(),
		"truncated":      newMP().arr(3).u(1).arr(1).arr(3).str("BlockRemoved").bytes(),
		"huge array":     newMP().arr(2).u(1).raw(0xdd, 0xff, 0xff, 0xff, 0xff).bytes(),
		"huge string":    newMP().arr(2).u(1).arr(1).arr(1).raw(0xdb, 0x7f, 0xff, 0xff, 0xff).bytes(),
		"tag not string": newMP().arr(2).u(1).arr(1).arr(1).u(3).bytes(),
		"no type":        newMP().arr(2).u(1).arr(1).mapl(1).str("block_hashes").us(1).bytes(),
		"token count":    newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(1).null().us(1).u(2).bytes(),
		"tokens over":    newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(1).null().us(1, 2, 3, 4).u(2).bytes(),
		"block size 0":   newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(1).null().us().u(0).bytes(),
		"neg token":      newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(1).null().arr(2).i(-1).u(1).u(2).bytes(),
		"big token":      newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(1).null().arr(2).u(1 << 32).u(1).u(2).bytes(),
		"hash float":     newMP().arr(2).u(1).arr(1).arr(2).str("BlockRemoved").arr(1).f(1).bytes(),
		"hash empty bin": newMP().arr(2).u(1).arr(1).arr(2).str("BlockRemoved").arr(1).bin(nil).bytes(),
		"neg rank":       newMP().arr(3).u(1).arr(0).i(-1).bytes(),
		"lora int":       newMP().arr(2).u(1).arr(1).arr(8).str("BlockStored").us(1).null().us(1).u(1).null().null().u(3).bytes(),
		"bad code":       newMP().arr(2).u(1).arr(1).raw(0xc1).bytes(),
	}
	for name, p := range cases {
		_, err := new(VLLMDecoder).Decode(p, 1)
		if err == nil || !errors.Is(err, ErrDecode) {
			t.Errorf("%s: err = %v, want ErrDecode", name, err)
		}
	}
}

// Token ids are hashed as kvidx hashes any token list: a trailing partial
// block is dropped (a BlockStored of 3 tokens in blocks of 2 was refused as
// undecodable, and the worker cleared). Found by review.
func TestDecodePartialTokenTail(t *testing.T) {
	p := newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(200).null().us(20, 21, 22).u(2).bytes()
	b, err := new(VLLMDecoder).Decode(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.LocalHashes(nil, []uint32{20, 21}, 2, "")
	if len(b.Events) != 1 || len(b.Events[0].Blocks) != 1 || b.Events[0].Blocks[0] != (engine.Block{BlockHash: 200, TokensHash: want[0]}) {
		t.Fatalf("events %+v, want one block (200, %d)", b.Events, want[0])
	}
}

func TestDecoderReuse(t *testing.T) {
	var d VLLMDecoder
	p1 := newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(1, 2).null().us(tokens(4, 1)...).u(2).bytes()
	p2 := newMP().arr(2).u(1).arr(1).arr(5).str("BlockStored").us(3).u(2).us(tokens(2, 50)...).u(2).bytes()
	b1, err := d.Decode(p1, 1)
	if err != nil {
		t.Fatal(err)
	}
	keep := append([]engine.Block(nil), b1.Events[0].Blocks...)
	if _, err := d.Decode([]byte{0x92, 0x01}, 1); err == nil {
		t.Fatal("want an error")
	}
	b2, err := d.Decode(p2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b1.Events[0].Blocks, keep) || b1.Events[0].HasParent {
		t.Fatal("a later Decode changed an earlier batch")
	}
	if !b2.Events[0].HasParent || b2.Events[0].ParentHash != 2 || len(b2.Events[0].Blocks) != 1 {
		t.Fatalf("%+v", b2.Events[0])
	}
}

// TestDecoderDeclaredLengths: a reused decoder fed payloads whose skipped
// values (an unknown event's string, bytes and ext fields) declare lengths
// far past the payload's end fails each one and allocates little; the
// msgpack package's Skip grew its buffer by up to 1 MiB per such payload and
// kept it. Well-formed values of those kinds are still skipped.
func TestDecoderDeclaredLengths(t *testing.T) {
	unknown := func(field ...byte) []byte {
		return newMP().arr(2).u(1).arr(1).arr(2).str("Future").raw(field...).bytes()
	}
	huge := map[string][]byte{
		"str32": unknown(0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'),
		"bin32": unknown(0xc6, 0x7f, 0xff, 0xff, 0xff, 'a'),
		"ext32": unknown(0xc9, 0x7f, 0xff, 0xff, 0xff, 1, 'a'),
		"ext16": unknown(0xc8, 0xff, 0xff, 1, 'a'),
	}
	var d VLLMDecoder
	for name, p := range huge {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 200 {
			if _, err := d.Decode(p, 1); !errors.Is(err, ErrDecode) {
				t.Fatalf("%s: err = %v, want ErrDecode", name, err)
			}
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 200*4096 {
			t.Errorf("%s: 200 decodes allocated %d bytes", name, n)
		}
	}
	ok := map[string][]byte{
		"str":  unknown(0xa3, 'a', 'b', 'c'),
		"bin":  unknown(0xc4, 2, 0, 0),
		"ext":  unknown(0xc7, 3, 5, 1, 2, 3),
		"fix4": unknown(0xd6, 5, 1, 2, 3, 4),
	}
	for name, p := range ok {
		b, err := d.Decode(p, 1)
		if err != nil || b.Unknown != 1 {
			t.Errorf("%s: %+v, %v", name, b, err)
		}
	}
}

// TestDecoderBoundedMemory: a corrupt payload's declared event count
// reserves no more than its bytes could decode to, and a huge batch's
// scratch buffers are not kept for the next one.
func TestDecoderBoundedMemory(t *testing.T) {
	var v VLLMDecoder
	p := binary.BigEndian.AppendUint32([]byte{0x92, 0x00, 0xdd}, 1<<20) // [ts, an array of 2^20 events...
	p = append(p, make([]byte, 1<<20)...)                               // ...of zero bytes]
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := v.Decode(p, 1); err == nil {
		t.Fatal("decoded garbage")
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 16*uint64(len(p)) {
		t.Errorf("a corrupt %d-byte payload allocated %d MiB", len(p), n>>20)
	}

	big := newMP().arr(3).f(0).arr(1).arr(2).str("BlockRemoved").arr(1 << 20)
	big.raw(bytes.Repeat([]byte{1}, 1<<20)...).u(0)
	b, err := v.Decode(big.bytes(), 1)
	if err != nil || len(b.Events) != 1 || len(b.Events[0].BlockHashes) != 1<<20 {
		t.Fatalf("big batch: %v", err)
	}
	if _, err := v.Decode(newMP().arr(2).u(1).arr(1).arr(2).str("BlockRemoved").us(1).bytes(), 1); err != nil {
		t.Fatal(err)
	}
	if c := cap(v.ev.hashes); c > maxKeptScratch {
		t.Errorf("the decoder keeps %d block hashes of scratch after a big batch", c)
	}
}

// TestGolden decodes testdata/vllm/*.msgpack and compares the events, as
// NDJSON (eventjson.AppendEvent), with the .ndjson file next to each.
// KVIDX_UPDATE_GOLDEN=1 rewrites the .msgpack and .ndjson files from
// goldenPayloads.
func TestGolden(t *testing.T) {
	dir := filepath.Join("testdata", "vllm")
	if os.Getenv("KVIDX_UPDATE_GOLDEN") != "" {
		for name, p := range goldenPayloads() {
			must(os.WriteFile(filepath.Join(dir, name+".msgpack"), p, 0o644))
			b, err := new(VLLMDecoder).Decode(p, 7)
			if err != nil {
				t.Fatal(name, err)
			}
			must(os.WriteFile(filepath.Join(dir, name+".ndjson"), ndjson(b.Events), 0o644))
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.msgpack"))
	if len(files) < 4 {
		t.Fatalf("%d golden files", len(files))
	}
	for _, f := range files {
		p, err := os.ReadFile(f)
		must(err)
		want, err := os.ReadFile(strings.TrimSuffix(f, ".msgpack") + ".ndjson")
		must(err)
		b, err := new(VLLMDecoder).Decode(p, 7)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if got := ndjson(b.Events); !bytes.Equal(got, want) {
			t.Errorf("%s:\ngot  %s\nwant %s", f, got, want)
		}
	}
}

func ndjson(evs []engine.Event) []byte {
	var out []byte
	for i := range evs {
		out = eventjson.AppendEvent(out, &evs[i])
		out = append(out, '\n')
	}
	return out
}

// goldenPayloads are the payloads of the golden files: vLLM's encodings
// (msgspec array_like tagged structs, and the map form).
func goldenPayloads() map[string][]byte {
	be := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	tok := tokens(32, 1000)
	return map[string][]byte{
		"array_uint_hashes": newMP().arr(3).f(1718000000.25).arr(3).
			arr(8).str("BlockStored").us(101, 102).null().us(tok[:32]...).u(16).null().str("GPU").null().
			arr(3).str("BlockRemoved").us(102).str("GPU").
			arr(1).str("AllBlocksCleared").
			u(0).bytes(),
		"array_int64_hashes_dp": newMP().arr(3).f(1.0).arr(2).
			arr(7).str("BlockStored").arr(2).i(-42).i(-9223372036854775808).i(-7).us(tok[:8]...).u(4).u(1).null().
			arr(2).str("BlockRemoved").arr(1).i(-42).
			u(3).bytes(),
		"array_bytes_hashes_lora": newMP().arr(3).f(2.0).arr(1).
			arr(8).str("BlockStored").arr(2).bin(append(bytes.Repeat([]byte{0xaa}, 24), be(0x1122334455667788)...)).bin(append(bytes.Repeat([]byte{0xbb}, 24), be(2)...)).
			bin(append(bytes.Repeat([]byte{0xcc}, 24), be(1)...)).us(tok[:32]...).u(16).u(5).str("GPU").str("adapter-a").
			null().bytes(),
		"map_form": newMP().mapl(3).str("ts").f(3.0).str("events").arr(2).
			mapl(8).str("type").str("BlockStored").str("block_hashes").us(201).str("parent_block_hash").null().
			str("token_ids").us(tok[:16]...).str("block_size").u(16).str("lora_id").null().str("medium").str("GPU").str("lora_name").null().
			mapl(2).str("type").str("BlockRemoved").str("block_hashes").arr(1).i(-201).
			str("data_parallel_rank").u(1).bytes(),
	}
}
