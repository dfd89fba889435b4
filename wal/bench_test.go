package wal

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvidx/kvidx"
	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/workload"
)

var benchWork struct {
	once sync.Once
	reqs [][]engine.Event
	ops  []int
	err  error
}

// benchRequests returns the events of each request of the Mooncake workload.
func benchRequests(b *testing.B) ([][]engine.Event, []int) {
	w := &benchWork
	w.once.Do(func() {
		tr, err := workload.ReadTrace(bytes.NewReader(kvidx.MooncakeTraceGz))
		if err != nil {
			w.err = err
			return
		}
		w.err = workload.Generate(context.Background(), tr, workload.DefaultConfig(), func(_ workload.Request, evs []engine.Event) error {
			if len(evs) > 0 {
				w.reqs = append(w.reqs, workload.CloneEvents(evs))
				w.ops = append(w.ops, workload.BlockOps(evs))
			}
			return nil
		})
	})
	if w.err != nil {
		b.Fatal(w.err)
	}
	return w.reqs, w.ops
}

// BenchmarkAppend: SyncAlways, P producers each submitting one request's
// events at a time. offered=0 runs closed-loop (as fast as acks come back);
// otherwise requests are released on a schedule of offered block ops/s,
// latency is measured from the scheduled time, and requests scheduled in
// the first openLoopWarmup are sent but not measured (a fresh log's first
// segment and the runtime's first collections are a start-up cost, not
// the steady state a server lives in).
const openLoopWarmup = 500 * time.Millisecond

func BenchmarkAppend(b *testing.B) {
	reqs, ops := benchRequests(b)
	cases := []struct{ producers, offered int }{{1, 0}, {4, 0}, {16, 0}, {64, 0}, {64, 500_000}}
	for _, c := range cases {
		name := fmt.Sprintf("producers=%d", c.producers)
		if c.offered > 0 {
			name += fmt.Sprintf("/offered=%dk", c.offered/1000)
		}
		b.Run(name, func(b *testing.B) {
			o := quietOpts()
			o.MaxPending = 1 << 16
			if v := os.Getenv("KVIDX_BENCH_SEGMENT"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					b.Fatalf("KVIDX_BENCH_SEGMENT=%q: %v", v, err)
				}
				o.SegmentSize = n
			}
			l, err := Open(b.TempDir(), o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var next atomic.Int64
			lats := make([][]time.Duration, c.producers)
			calls := make([][]time.Duration, c.producers)
			var wg sync.WaitGroup
			// Collect the workload generator's garbage now, not during the
			// timed run, where its marking would stall producers.
			runtime.GC()
			b.ResetTimer()
			start := time.Now()
			// due[i] is when request i is released in open-loop mode.
			var due []time.Duration
			if c.offered > 0 {
				due = make([]time.Duration, b.N)
				var cum int64
				for i := range due {
					due[i] = time.Duration(cum * int64(time.Second) / int64(c.offered))
					cum += int64(ops[i%len(ops)])
				}
			}
			for p := range c.producers {
				wg.Go(func() {
					ctx := context.Background()
					for {
						i := int(next.Add(1) - 1)
						if i >= b.N {
							return
						}
						t0 := time.Now()
						if due != nil {
							at := start.Add(due[i])
							time.Sleep(time.Until(at))
							t0 = at
						}
						called := time.Now()
						if _, err := l.Append(ctx, reqs[i%len(reqs)], nil); err != nil {
							b.Error(err)
							return
						}
						done := time.Now()
						if due != nil && due[i] < openLoopWarmup {
							continue
						}
						lats[p] = append(lats[p], done.Sub(t0))
						calls[p] = append(calls[p], done.Sub(called))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			b.StopTimer()
			st := l.Stats()
			var blockOps, stored int64
			for i := range b.N {
				blockOps += int64(ops[i%len(ops)])
				for _, ev := range reqs[i%len(reqs)] {
					stored += int64(len(ev.Blocks))
				}
			}
			all := slices.Concat(lats...)
			slices.Sort(all)
			inCall := slices.Concat(calls...)
			slices.Sort(inCall)
			pctOf := func(ds []time.Duration, q float64) float64 {
				if len(ds) == 0 {
					return 0
				}
				return float64(ds[int(q*float64(len(ds)-1))]) / float64(time.Microsecond)
			}
			pct := func(q float64) float64 { return pctOf(all, q) }
			b.ReportMetric(float64(st.Events)/elapsed, "events/s")
			b.ReportMetric(float64(blockOps)/elapsed, "block_ops/s")
			b.ReportMetric(float64(st.Syncs)/elapsed, "fsyncs/s")
			b.ReportMetric(pct(0.50), "p50_us")
			b.ReportMetric(pct(0.99), "p99_us")
			b.ReportMetric(pct(0.999), "p99.9_us")
			// From the Append call alone: without the time a request waited
			// for a free producer (open loop) or the producer woke late.
			b.ReportMetric(pctOf(inCall, 0.99), "p99_in_call_us")
			if stored > 0 {
				b.ReportMetric(float64(st.Bytes)/float64(stored), "bytes/stored_block")
			}
			b.ReportMetric(float64(st.Appends)/float64(max(st.Entries, 1)), "batches/entry")
		})
	}
}
