package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvidx/kvidx"
	"github.com/kvidx/kvidx/workload"
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	def := workload.DefaultConfig()
	var (
		cfg       = workload.BenchConfig{Config: def}
		traceFile string
		asJSON    bool
		progress  bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark the engine on a Mooncake trace",
		Long: `Replay a Mooncake request trace as KV-cache events through a fresh index and
measure it.

The workload is pinned so figures compare across runs: each trace record is
emitted --duplicate times (each copy with its own block ids); --workers
simulated workers, each an LRU cache of --capacity blocks, serve the requests;
the router sends a request to the worker with the lowest (uncached blocks +
blocks routed to it among the last --workers requests). The worker stores
what it missed and evicts least recently used blocks beyond its capacity.

The index starts empty and grows as it fills. With --reserve it is first
sized for --workers x --capacity holder-blocks (untimed), as kvidx serve
--reserve-blocks does for a node that knows its workers' cache sizes: it then
mostly neither resizes its tables nor maps fresh memory while events are
timed. Its heap then includes what the run leaves unused of the reservation
(the default run fills less than half of it).

Per request, Match is timed alone (lookup latency), then the worker's events
are applied (apply throughput). Reported: requests, events, block_ops (blocks
stored + blocks removed), apply_block_ops_per_s, lookup_p50_us, lookup_p99_us,
entries, holder_blocks, heap_bytes_per_holder_block (heap of the final index
after GC / holder blocks) and prefix_hit_rate.

--heap-marks measures the heap in use after GC (untimed) when the run passes
each listed block-op count, verifies the final index, and prints the marks,
the growth from the first to the last, and the number of empty entries
(Verify) on stderr; a Verify failure fails the command. Under steady churn
(e.g. --duplicate 100 passes 10M block ops) the heap must stay flat and the
index hold no empty entry.

Without --trace the trace embedded in kvidx (3,993 requests) is used; a trace
file may be plain JSON lines or gzipped.`,
		Example: `  kvidx bench
  kvidx bench --json --duplicate 24
  kvidx bench --json --duplicate 24 --reserve
  kvidx bench --duplicate 100 --heap-marks 2000000,10000000
  kvidx bench --trace mooncake_trace.jsonl --workers 64 --capacity 16384`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Verify = len(cfg.HeapMarks) > 0
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			if cfg.Reserve {
				if err := checkReservation("bench: --reserve (--workers x --capacity)", cfg.Workers*cfg.Capacity); err != nil {
					return err
				}
			}
			tr, err := loadTrace(traceFile)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			// SIGINT and SIGTERM alike end the run with a short error
			// (SIGTERM killed it without a word).
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()

			pr, pf := newRunProgress(cmd, "bench", progress)
			rep, err := workload.Bench(ctx, tr, cfg, pf)
			pr.done()
			if err != nil {
				if ctx.Err() != nil {
					// Not "bench: context canceled".
					return errors.New("bench: interrupted, no report")
				}
				return err
			}

			out := cmd.OutOrStdout()
			if asJSON {
				err = writeJSON(out, rep)
			} else {
				err = rep.WriteTable(out)
			}
			if err != nil {
				return fmt.Errorf("bench: write report: %w", err)
			}
			if len(cfg.HeapMarks) > 0 {
				if err := rep.WriteHeapMarks(cmd.ErrOrStderr()); err != nil {
					return fmt.Errorf("bench: write heap marks: %w", err)
				}
			}
			if rep.VerifyErr != nil {
				return fmt.Errorf("bench: index fails Verify: %w", rep.VerifyErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&traceFile, "trace", "", "Mooncake trace `file` (JSON lines, plain or gzipped); default: the embedded trace")
	f.IntVar(&cfg.Workers, "workers", def.Workers, "simulated workers (also the routing load window, in requests)")
	f.IntVar(&cfg.Capacity, "capacity", def.Capacity, "KV blocks each worker's LRU cache holds")
	f.IntVar(&cfg.Duplicate, "duplicate", def.Duplicate, "copies of each trace record, each with its own block ids")
	f.BoolVar(&cfg.Reserve, "reserve", false, "size the index for workers x capacity holder-blocks before the run, untimed")
	f.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	f.Int64SliceVar(&cfg.HeapMarks, "heap-marks", nil, "block-op `counts` at which to measure the heap after GC, ascending (e.g. 2000000,10000000)")
	// pflag takes "[]" for a set default of an int64 list (it knows it as
	// empty only for int and string lists) and --help printed "(default [])".
	f.Lookup("heap-marks").DefValue = ""
	f.BoolVar(&progress, "progress", false, "print progress on stderr even when it is not a terminal")
	return cmd
}

// loadTrace reads the trace file, or the embedded trace when path is empty.
func loadTrace(path string) (*workload.Trace, error) {
	if path == "" {
		tr, err := workload.ReadTrace(bytes.NewReader(kvidx.MooncakeTraceGz))
		if err != nil {
			return nil, fmt.Errorf("embedded trace: %w", err)
		}
		return tr, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	tr, err := workload.ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(tr.Records) == 0 {
		return nil, fmt.Errorf("%s: trace has no records", path)
	}
	return tr, nil
}
