package engine_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvidx/kvidx"
	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/workload"
)

var (
	bigOnce  sync.Once
	bigIndex *engine.Index
)

// workloadIndex is the Mooncake workload's index at 1.04M holder-blocks
// (128 workers x 8192 blocks, K=24), built once per test binary.
func workloadIndex(b *testing.B) *engine.Index {
	bigOnce.Do(func() {
		tr, err := workload.ReadTrace(bytes.NewReader(kvidx.MooncakeTraceGz))
		if err != nil {
			b.Fatal(err)
		}
		ix := engine.New()
		if err := workload.Run(context.Background(), ix, tr, workload.Config{Workers: 128, Capacity: 8192, Duplicate: 24}, nil); err != nil {
			b.Fatal(err)
		}
		bigIndex = ix
	})
	return bigIndex
}

func BenchmarkFreeze(b *testing.B) {
	ix := workloadIndex(b)
	hb := float64(ix.Stats().HolderBlocks)
	var worst time.Duration
	ix.Freeze().Release(ix) // the first copy faults its memory in
	for b.Loop() {
		f := ix.Freeze()
		worst = max(worst, f.Pause())
		f.Release(ix)
	}
	b.ReportMetric(float64(worst.Milliseconds())/(hb/1e6), "worst_pause_ms/1M_holder_blocks")
}

func BenchmarkPlaces(b *testing.B) {
	f := workloadIndex(b).Freeze()
	hb := float64(f.Stats().HolderBlocks)
	for b.Loop() {
		f.Places(func(*engine.PlaceRecord) bool { return true })
	}
	b.ReportMetric(hb*float64(b.N)/b.Elapsed().Seconds(), "holder_blocks/s")
}

func BenchmarkLoad(b *testing.B) {
	f := workloadIndex(b).Freeze()
	var recs []engine.PlaceRecord
	f.Places(func(r *engine.PlaceRecord) bool {
		c := *r
		c.Holders = nil
		for _, h := range r.Holders {
			c.Holders = append(c.Holders, engine.HolderRecord{Worker: h.Worker, BlockHashes: append([]uint64(nil), h.BlockHashes...)})
		}
		recs = append(recs, c)
		return true
	})
	hb := float64(f.Stats().HolderBlocks)
	for b.Loop() {
		l := engine.NewLoader()
		for i := range recs {
			if err := l.Add(&recs[i]); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := l.Finish(f.Stats().Counters); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(hb*float64(b.N)/b.Elapsed().Seconds(), "holder_blocks/s")
}
