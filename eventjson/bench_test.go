package eventjson

import (
	"strconv"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// storedLine is a realistic Stored event: 32 blocks of random-looking 64-bit hashes.
func storedLine(blocks int) []byte {
	ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 1234567, DPRank: 3}, EventID: 987654321, Kind: engine.KindStored, HasParent: true, ParentHash: 0x9e3779b97f4a7c15}
	h := uint64(0x243f6a8885a308d3)
	for range blocks {
		h = h*6364136223846793005 + 1442695040888963407
		bh := h
		h = h*6364136223846793005 + 1442695040888963407
		ev.Blocks = append(ev.Blocks, engine.Block{BlockHash: bh, TokensHash: h})
	}
	return AppendEvent(nil, &ev)
}

func BenchmarkDecodeStored32(b *testing.B) {
	line := storedLine(32)
	var d Decoder
	var ev engine.Event
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(line, &ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*32/b.Elapsed().Seconds(), "blocks/s")
}

func BenchmarkDecodeBatch(b *testing.B) {
	var body []byte
	for range 64 {
		body = append(append(body, storedLine(32)...), '\n')
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBatch(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*64*32/b.Elapsed().Seconds(), "blocks/s")
}

func BenchmarkAppendEvent(b *testing.B) {
	ev, err := DecodeEvent(storedLine(32))
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEvent(buf[:0], &ev)
	}
	b.ReportMetric(float64(b.N)*32/b.Elapsed().Seconds(), "blocks/s")
}

// BenchmarkDecodeQuery decodes a match query of 40 local hashes (the shape
// of POST /v1/match).
func BenchmarkDecodeQuery(b *testing.B) {
	body := []byte(`{"local_hashes":[`)
	h := uint64(0x243f6a8885a308d3)
	for i := range 40 {
		if i > 0 {
			body = append(body, ',')
		}
		h = h*6364136223846793005 + 1442695040888963407
		body = strconv.AppendUint(body, h, 10)
	}
	body = append(body, "]}"...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeQuery(body); err != nil {
			b.Fatal(err)
		}
	}
}
