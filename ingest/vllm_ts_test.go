package ingest

import (
	"math"
	"testing"
)

// A batch's ts is read when it is a number (vLLM sends a float), in both
// batch forms; anything else is skipped, and the batch still decodes.
func TestDecodeBatchTS(t *testing.T) {
	cleared := func(m *mp) *mp { return m.arr(1).arr(1).str("AllBlocksCleared") }
	cases := []struct {
		name    string
		payload []byte
		ts      float64
		ok      bool
	}{
		{"float", cleared(newMP().arr(2).f(1764534000.25)).bytes(), 1764534000.25, true},
		{"float32", cleared(newMP().arr(2).raw(0xca, 0x3f, 0xc0, 0, 0)).bytes(), 1.5, true},
		{"integer", cleared(newMP().arr(2).u(1764534000)).bytes(), 1764534000, true},
		{"negative integer", cleared(newMP().arr(2).i(-3)).bytes(), -3, true},
		{"null", cleared(newMP().arr(2).null()).bytes(), 0, false},
		{"string", cleared(newMP().arr(2).str("now")).bytes(), 0, false},
		{"NaN", cleared(newMP().arr(2).f(math.NaN())).bytes(), 0, false},
		{"map", cleared(newMP().mapl(2).str("ts").f(2.5).str("events")).bytes(), 2.5, true},
		{"map without ts", cleared(newMP().mapl(1).str("events")).bytes(), 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d VLLMDecoder
			b, err := d.Decode(c.payload, 1)
			if err != nil {
				t.Fatal(err)
			}
			if b.HasTS != c.ok || (c.ok && b.TS != c.ts) || len(b.Events) != 1 {
				t.Fatalf("ts %v (%v), %d events; want %v (%v), 1 event", b.TS, b.HasTS, len(b.Events), c.ts, c.ok)
			}
		})
	}
}
