package snapshot

import (
	"bytes"
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvidx/kvidx"
	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/workload"
)

// Benchmark sizes: the index the Mooncake workload leaves. 10M is opt-in
// (KVIDX_BENCH_10M=1): building it takes a while.
var benchSizes = []struct {
	name string
	cfg  workload.Config
	big  bool
}{
	{"1M", workload.Config{Workers: 128, Capacity: 8192, Duplicate: 24}, false},
	{"10M", workload.Config{Workers: 128, Capacity: 81920, Duplicate: 240}, true},
}

var benchIndexes sync.Map // name -> *engine.Index

func benchIndex(b *testing.B, name string, cfg workload.Config) *engine.Index {
	if ix, ok := benchIndexes.Load(name); ok {
		return ix.(*engine.Index)
	}
	tr, err := workload.ReadTrace(bytes.NewReader(kvidx.MooncakeTraceGz))
	if err != nil {
		b.Fatal(err)
	}
	ix := engine.New()
	if err := workload.Run(context.Background(), ix, tr, cfg, nil); err != nil {
		b.Fatal(err)
	}
	benchIndexes.Store(name, ix)
	return ix
}

func eachSize(b *testing.B, fn func(b *testing.B, ix *engine.Index)) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			if s.big && os.Getenv("KVIDX_BENCH_10M") == "" {
				b.Skip("set KVIDX_BENCH_10M=1")
			}
			ix := benchIndex(b, s.name, s.cfg)
			b.ResetTimer()
			fn(b, ix)
		})
	}
}

func reportRate(b *testing.B, hbs int) {
	b.ReportMetric(float64(hbs)*float64(b.N)/b.Elapsed().Seconds(), "holder_blocks/s")
}

// BenchmarkFreeze times Freeze and the pause it imposes on event
// application (Frozen.Pause), each copy in fresh memory (none is released).
func BenchmarkFreeze(b *testing.B) {
	eachSize(b, func(b *testing.B, ix *engine.Index) {
		hbs := ix.Stats().HolderBlocks
		var pause time.Duration
		for b.Loop() {
			pause = max(pause, ix.Freeze().Pause())
		}
		ms := float64(b.Elapsed().Milliseconds()) / float64(b.N)
		b.ReportMetric(ms, "ms/freeze")
		b.ReportMetric(float64(pause.Microseconds())/1e3/(float64(hbs)/1e6), "worst_pause_ms_per_1M_holder_blocks")
	})
}

// BenchmarkPlaces times engine.Frozen.Places alone: the engine's share of Write.
func BenchmarkPlaces(b *testing.B) {
	eachSize(b, func(b *testing.B, ix *engine.Index) {
		f := ix.Freeze()
		for b.Loop() {
			f.Places(func(*engine.PlaceRecord) bool { return true })
		}
		reportRate(b, ix.Stats().HolderBlocks)
	})
}

// BenchmarkWrite times Write of a frozen index, Places included. Besides
// the mean it reports the first write (cold: Places' working memory and
// bbolt's buffers are new memory) and the median of the others (warm: what
// a node's periodic snapshots see, as Release hands the copy and its working
// memory back and each write starts with a collection).
func BenchmarkWrite(b *testing.B) {
	eachSize(b, func(b *testing.B, ix *engine.Index) {
		f := ix.Freeze()
		dir := b.TempDir()
		var size int64
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			p, err := Write(context.Background(), dir, f, Meta{Index: 1})
			if err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
			fi, err := os.Stat(p)
			if err != nil {
				b.Fatal(err)
			}
			size = fi.Size()
		}
		hbs := ix.Stats().HolderBlocks
		reportRate(b, hbs)
		b.ReportMetric(float64(hbs)/took[0].Seconds(), "cold_holder_blocks/s")
		if warm := took[1:]; len(warm) > 0 {
			slices.Sort(warm)
			b.ReportMetric(float64(hbs)/warm[len(warm)/2].Seconds(), "warm_holder_blocks/s")
		}
		b.ReportMetric(float64(size)/float64(hbs), "file_bytes/holder_block")
		b.ReportMetric(float64(hbs), "holder_blocks")
	})
}

// BenchmarkLoad times Load (read, check, rebuild the index).
func BenchmarkLoad(b *testing.B) {
	eachSize(b, func(b *testing.B, ix *engine.Index) {
		p, err := Write(context.Background(), b.TempDir(), ix.Freeze(), Meta{Index: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, _, err := Load(context.Background(), p); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, ix.Stats().HolderBlocks)
	})
}

// BenchmarkVerify times reading and checking a file without the engine's loader.
func BenchmarkVerify(b *testing.B) {
	eachSize(b, func(b *testing.B, ix *engine.Index) {
		p, err := Write(context.Background(), b.TempDir(), ix.Freeze(), Meta{Index: 1})
		if err != nil {
			b.Fatal(err)
		}
		r, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		b.ResetTimer()
		for b.Loop() {
			if err := r.Verify(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, ix.Stats().HolderBlocks)
	})
}
