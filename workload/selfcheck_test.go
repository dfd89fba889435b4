package workload

import (
	"context"
	"math"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// TestSelfCheck pins the prefix hit rate of the embedded trace, so that any
// change to the workload rules (ids, hashing, routing, LRU, event order) shows.
// Reference figures with W=128, C=8192: K=1 0.449174 (67,133 holder blocks),
// K=8 0.514543 (473,328) and K=24 0.521878 (1,036,074), the figures the
// engine issue names (0.514 and 0.522, about 1.04M holder-blocks). The
// benchmarks check them too, but CI runs no benchmark.
func TestSelfCheck(t *testing.T) {
	tests := []struct {
		duplicate int
		hitRate   float64 // to 6 decimals
		holders   int
	}{
		{duplicate: 1, hitRate: 0.449174, holders: 67133},
		{duplicate: 8, hitRate: 0.514543, holders: 473328},
		{duplicate: 24, hitRate: 0.521878, holders: 1036074},
	}
	tr := embeddedTrace(t)
	for _, tc := range tests {
		cfg := Config{Workers: 128, Capacity: 8192, Duplicate: tc.duplicate}
		ix := engine.New()
		var matched, blocks int
		err := Run(context.Background(), ix, tr, cfg, func(req Request, _ []engine.Event) error {
			matched += req.Matched
			blocks += req.Blocks()
			return nil
		})
		if err != nil {
			t.Fatalf("K=%d: %v", tc.duplicate, err)
		}
		rate := float64(matched) / float64(blocks)
		t.Logf("K=%d: prefix hit rate %.6f, %d holder blocks", tc.duplicate, rate, ix.Stats().HolderBlocks)
		if math.Round(rate*1e6)/1e6 != tc.hitRate {
			t.Errorf("K=%d: prefix hit rate %.6f, want %.6f", tc.duplicate, rate, tc.hitRate)
		}
		if got := ix.Stats().HolderBlocks; got != tc.holders {
			t.Errorf("K=%d: %d holder blocks, want %d", tc.duplicate, got, tc.holders)
		}
	}
}
