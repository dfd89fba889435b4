package workload

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/kvidx/kvidx/engine"
)

// BenchConfig is one [Bench] run.
type BenchConfig struct {
	Config
	// HeapMarks are block-op counts (ascending, positive) at which Bench
	// measures the heap in use after GC, untimed. Empty: none.
	HeapMarks []int64
	// Verify runs [engine.Index.Verify] on the final index (untimed; it walks
	// the whole index and may take longer than the replay).
	Verify bool
	// Reserve sizes the index for Workers x Capacity holder-blocks (at most
	// the workload's blocks) of Workers worker keys before the run, untimed (see [engine.Index.Reserve]), as a
	// router node that knows its workers' cache sizes does. Without it the
	// index grows from empty during the timed applies.
	Reserve bool
}

// Validate reports a config Bench cannot run.
func (c BenchConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	for i, m := range c.HeapMarks {
		if m <= 0 {
			return fmt.Errorf("heap mark %d must be > 0", m)
		}
		if i > 0 && m <= c.HeapMarks[i-1] {
			return fmt.Errorf("heap marks must be strictly ascending, got %d after %d", m, c.HeapMarks[i-1])
		}
	}
	return nil
}

// maxLatencyReserve is how many lookup latencies Bench reserves room for
// before the run: the reference workloads' requests (K=8: 31,944; K=100:
// 399,300) fit, and larger runs grow the slice as they go.
const maxLatencyReserve = 1 << 20

// ProgressFunc receives a run's progress: requests done of total, and the time
// since the run started.
type ProgressFunc func(done, total int, elapsed time.Duration)

// Bench replays the workload of tr through a fresh [engine.Index] (reserved
// if cfg.Reserve) and measures it. Per request it times ix.Match alone (lookup latency), routes and serves
// the request in the simulator (untimed), then times the ix.Apply calls of its
// events (apply throughput). Heap marks, the final [engine.Index.Verify] (if
// asked for) and the heap measurements are untimed. progress, if not nil, is
// called at most once a second. Bench fails if the index rejects an event or
// ctx is cancelled.
func Bench(ctx context.Context, tr *Trace, cfg BenchConfig, progress ProgressFunc) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	if err := cfg.validateFor(tr); err != nil {
		return nil, err
	}
	sim, err := NewSimulator(cfg.Config)
	if err != nil {
		return nil, err
	}
	total := NumRequests(tr, cfg.Duplicate)
	// Latencies grow with the run; reserving room for all of them up front
	// would ask for 8 bytes a request before the first one ran (a huge
	// --duplicate crashed the process with a runtime out-of-memory error).
	lat := make([]time.Duration, 0, min(total, maxLatencyReserve))
	marks := make([]HeapMark, len(cfg.HeapMarks))
	for i, t := range cfg.HeapMarks {
		marks[i].Target = t
	}
	nextMark := 0

	ix := engine.New()
	if cfg.Reserve {
		// A small trace never fills a large simulated cluster.
		if err := ix.Reserve(ctx, min(cfg.Workers*cfg.Capacity, NumBlocks(tr, cfg.Duplicate)), cfg.Workers); err != nil {
			return nil, err
		}
	}
	var (
		applyTime, matchTime time.Duration
		events, blockOps     int64
	)
	start := time.Now()
	lastProgress := start
	for req := range Requests(tr, cfg.Duplicate) {
		if req.Seq%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
		}

		t0 := time.Now()
		scores := ix.Match(req.TokensHashes, nil)
		d := time.Since(t0)
		lat = append(lat, d)
		matchTime += d

		w, _ := sim.Route(req.Blocks(), scores)
		evs := sim.Serve(w, req)

		t1 := time.Now()
		for i := range evs {
			if err := ix.Apply(&evs[i]); err != nil {
				return nil, applyError(req, &evs[i], err)
			}
		}
		t2 := time.Now()
		applyTime += t2.Sub(t1)

		events += int64(len(evs))
		blockOps += int64(BlockOps(evs))
		for nextMark < len(marks) && blockOps >= marks[nextMark].Target {
			marks[nextMark].Reached = true
			marks[nextMark].BlockOps = blockOps
			ix.WaitGrowth()
			marks[nextMark].HeapBytes = heapInUse()
			nextMark++
		}
		if progress != nil && t2.Sub(lastProgress) >= time.Second {
			progress(req.Seq+1, total, t2.Sub(start))
			lastProgress = time.Now()
		}
	}
	elapsed := time.Since(start)

	st := ix.Stats()
	rep := &Report{
		Requests:      len(lat),
		Events:        events,
		BlockOps:      blockOps,
		Entries:       ix.Len(),
		HolderBlocks:  st.HolderBlocks,
		PrefixHitRate: round(sim.HitRate(), 6),
		Config:        cfg.Config,
		Elapsed:       elapsed,
		ApplyTime:     applyTime,
		MatchTime:     matchTime,
		HeapMarks:     marks,
	}
	if cfg.Verify {
		rep.Verified, rep.VerifyErr = true, ix.Verify()
	}
	if applyTime > 0 {
		rep.ApplyBlockOpsPerS = math.Round(float64(blockOps) / applyTime.Seconds())
	}
	slices.Sort(lat)
	rep.LookupP50us = round(micros(percentile(lat, 0.50)), 3)
	rep.LookupP99us = round(micros(percentile(lat, 0.99)), 3)

	// Heap of the index: in use with it alive, minus in use with it dropped;
	// everything else (simulator, trace, latencies) is alive in both.
	ix.WaitGrowth() // memory made ahead is not the index's, and its jobs hold ix
	withIndex := heapInUse()
	runtime.KeepAlive(ix)
	ix = nil // also clears the loop body's captured reference
	withoutIndex := heapInUse()
	runtime.KeepAlive(sim)
	runtime.KeepAlive(tr)
	runtime.KeepAlive(lat)
	rep.IndexHeapBytes = int64(withIndex) - int64(withoutIndex)
	if rep.HolderBlocks > 0 {
		rep.HeapBytesPerHolderBlock = round(float64(rep.IndexHeapBytes)/float64(rep.HolderBlocks), 2)
	}
	return rep, nil
}

// percentile returns the nearest-rank p-quantile of sorted (0 if empty).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func round(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}
