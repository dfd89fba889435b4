package workload

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// BenchmarkApply applies the event stream of the reference workload (W=128,
// C=8192, K=8), generated outside the timer, to a fresh index per iteration,
// which grows as it fills.
func BenchmarkApply(b *testing.B) { benchApply(b, false) }

// BenchmarkApplyReserved is BenchmarkApply with each fresh index reserved
// for the workload's W x C holder-blocks outside the timer, as kvidx bench
// and a node started with --reserve-blocks do (see engine.Index.Reserve).
func BenchmarkApplyReserved(b *testing.B) { benchApply(b, true) }

func benchApply(b *testing.B, reserve bool) {
	tr := embeddedTrace(b)
	cfg := DefaultConfig()
	var (
		stream          []engine.Event
		ops             int64
		matched, blocks int
	)
	err := Generate(context.Background(), tr, cfg, func(req Request, evs []engine.Event) error {
		stream = append(stream, CloneEvents(evs)...)
		ops += int64(BlockOps(evs))
		matched += req.Matched
		blocks += req.Blocks()
		return nil
	})
	if err != nil {
		b.Fatalf("Generate: %v", err)
	}
	if rate := round(float64(matched)/float64(blocks), 6); rate != 0.514543 {
		b.Fatalf("prefix hit rate %v, want 0.514543: the workload changed", rate)
	}

	b.ReportAllocs()
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		ix := engine.New()
		if reserve {
			ix.Reserve(context.Background(), cfg.Workers*cfg.Capacity, cfg.Workers)
		}
		b.StartTimer()
		start := time.Now()
		for i := range stream {
			if err := ix.Apply(&stream[i]); err != nil {
				b.Fatalf("event %d: %v", i, err)
			}
		}
		elapsed += time.Since(start)
	}
	total := float64(ops) * float64(b.N)
	b.ReportMetric(total/elapsed.Seconds(), "block_ops/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/total, "ns/block_op")
}

// BenchmarkApplySteady applies events to an index under steady cache churn,
// what a long-running router node sees: the K=100 workload's first 4M block
// ops fill every worker's cache (untimed), then the next 5M, each Stored
// event followed by the Removed event of its evictions, are timed. The
// stream is generated outside the timer.
func BenchmarkApplySteady(b *testing.B) {
	const warmOps, endOps = 4_000_000, 9_000_000
	tr := embeddedTrace(b)
	cfg := Config{Workers: 128, Capacity: 8192, Duplicate: 100}
	var (
		stream []engine.Event
		ops    int64
		warm   = -1
	)
	done := errors.New("enough events")
	err := Generate(context.Background(), tr, cfg, func(_ Request, evs []engine.Event) error {
		if warm < 0 && ops >= warmOps {
			warm = len(stream)
		}
		stream = append(stream, CloneEvents(evs)...)
		ops += int64(BlockOps(evs))
		if ops >= endOps {
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		b.Fatalf("Generate ended before %d block ops: %v", endOps, err)
	}
	timed := int64(BlockOps(stream[warm:]))

	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		ix := engine.New()
		for i := range stream[:warm] {
			if err := ix.Apply(&stream[i]); err != nil {
				b.Fatalf("event %d: %v", i, err)
			}
		}
		b.StartTimer()
		start := time.Now()
		for i := warm; i < len(stream); i++ {
			if err := ix.Apply(&stream[i]); err != nil {
				b.Fatalf("event %d: %v", i, err)
			}
		}
		elapsed += time.Since(start)
	}
	total := float64(timed) * float64(b.N)
	b.ReportMetric(total/elapsed.Seconds(), "block_ops/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/total, "ns/block_op")
}

// BenchmarkMatch times Match, one call per op, over the requests of the K=24
// workload against the index state that workload leaves (over 1M holder
// blocks). It reports percentiles of the per-call durations.
func BenchmarkMatch(b *testing.B) {
	tr := embeddedTrace(b)
	cfg := Config{Workers: 128, Capacity: 8192, Duplicate: 24}
	ix := engine.New()
	var (
		flat            []uint64
		ends            []int
		matched, blocks int
	)
	err := Run(context.Background(), ix, tr, cfg, func(req Request, _ []engine.Event) error {
		flat = append(flat, req.TokensHashes...)
		ends = append(ends, len(flat))
		matched += req.Matched
		blocks += req.Blocks()
		return nil
	})
	if err != nil {
		b.Fatalf("Run: %v", err)
	}
	if rate := round(float64(matched)/float64(blocks), 6); rate != 0.521878 {
		b.Fatalf("prefix hit rate %v, want 0.521878: the workload changed", rate)
	}
	if h := ix.Stats().HolderBlocks; h < 1_000_000 {
		b.Fatalf("%d holder blocks, want >= 1M", h)
	}
	queries := make([][]uint64, len(ends))
	for i, end := range ends {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		queries[i] = flat[start:end:end]
	}

	samples := make([]time.Duration, 1<<20) // a ring of the latest per-call durations
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		q := queries[n%len(queries)]
		t0 := time.Now()
		ix.Match(q, nil)
		samples[n%len(samples)] = time.Since(t0)
		n++
	}
	samples = samples[:min(n, len(samples))]
	slices.Sort(samples)
	b.ReportMetric(micros(percentile(samples, 0.50)), "p50_us")
	b.ReportMetric(micros(percentile(samples, 0.99)), "p99_us")
}

// BenchmarkChurn runs the workload under steady cache churn (K=100) until it
// passes 10M block ops and reports the heap growth between the 2M and 10M
// block-op marks (heap in use after GC). It fails if the index then fails
// Verify (e.g. keeps an empty entry).
func BenchmarkChurn(b *testing.B) {
	tr := embeddedTrace(b)
	cfg := Config{Workers: 128, Capacity: 8192, Duplicate: 100}
	marks := []int64{2_000_000, 10_000_000}
	for b.Loop() {
		heaps := make([]HeapMark, len(marks))
		next := 0
		var ops int64
		done := errors.New("last heap mark reached")
		ix := engine.New()
		err := Run(context.Background(), ix, tr, cfg, func(_ Request, evs []engine.Event) error {
			ops += int64(BlockOps(evs))
			for next < len(marks) && ops >= marks[next] {
				ix.WaitGrowth()
				heaps[next] = HeapMark{Target: marks[next], Reached: true, BlockOps: ops, HeapBytes: heapInUse()}
				if next++; next == len(marks) {
					return done
				}
			}
			return nil
		})
		if !errors.Is(err, done) {
			b.Fatalf("Run ended with %d block ops before the last mark: %v", ops, err)
		}
		if err := ix.Verify(); err != nil {
			b.Fatalf("Verify after %d block ops: %v", ops, err)
		}
		growth, _ := HeapGrowthPct(heaps)
		b.ReportMetric(growth, "heap_growth_pct")
		b.ReportMetric(float64(heaps[0].HeapBytes)/(1<<20), "heap_2M_MiB")
		b.ReportMetric(float64(heaps[1].HeapBytes)/(1<<20), "heap_10M_MiB")
	}
}
