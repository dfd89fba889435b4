package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/node"
	"github.com/kvidx/kvidx/workload"
)

// loadgen generates its whole workload before the run, about
// loadRequestBytes a request: maxLoadRequests (about 8 GB) keeps a large
// --duplicate from filling the machine's memory before anything is sent.
const (
	loadRequestBytes = 4 << 10
	maxLoadRequests  = 2 << 20
)

func newLoadgenCmd() *cobra.Command {
	var (
		target    string
		tracePath string
		cfg       = workload.Config{Workers: 128, Capacity: 8192, Duplicate: 8}
		opts      = node.LoadOptions{Concurrency: 16, Duration: 30 * time.Second}
		asJSON    bool
		progress  bool
	)
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Drive a running kvidx serve with the Mooncake workload over HTTP",
		Long: `Loadgen pre-generates the Mooncake workload (the same fleet simulation as
kvidx bench: --workers LRU caches of --capacity blocks, each trace record
repeated --duplicate times), then replays it against --target until the
workload or --duration runs out (a post in flight then, and each post of the
events still queued, gets 10 s: a server that stops answering fails the run).

--concurrency match clients share the workers. Each walks its workers'
requests in order: a POST /v1/match with the request's local hashes, then
the request's events join the queue of one of the --posters event posters.
A poster sends everything queued as one POST /v1/events as soon as its
previous post is acknowledged (as an event collector batches while the log
syncs), so each worker's events stay in order and trail their matches by
about one commit; a client with 64 requests' events unacknowledged waits
before matching more.

It reports match requests/s and latency, events/s, block ops/s, event-post
latency and how long events trailed their match. The client is a minimal
keep-alive HTTP/1.1 client (plain http:// only), so that most of the CPU
the two share goes to the server being measured. The whole workload is
generated before the run, in memory: about 4 KB per request (--duplicate
160, 639k requests, takes 2.6 GB and half a minute); more than 2M requests
are refused.

The target must start empty of these workers (e.g. a fresh data directory):
on an index that already holds the workload, its stores are duplicates
(counted in the server's duplicate_store counter, not as rejected) and its
matches score against more than the workload built, which skews the figures.`,
		Example: `  kvidx serve --data-dir /tmp/kvidx-load &
  kvidx loadgen --target http://127.0.0.1:8585 --concurrency 16 --duration 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("loadgen: %w", err)
			}
			// LoadOptions takes 0 for its defaults; on the command line a
			// 0 is a mistake, not a wish for the default.
			switch fl := cmd.Flags(); {
			case fl.Changed("concurrency") && opts.Concurrency < 1:
				return fmt.Errorf("loadgen: --concurrency %d: want at least 1", opts.Concurrency)
			case fl.Changed("posters") && opts.Posters < 1:
				return fmt.Errorf("loadgen: --posters %d: want at least 1", opts.Posters)
			case opts.Duration <= 0:
				return fmt.Errorf("loadgen: --duration %v: want a positive duration", opts.Duration)
			}
			tr, err := loadTrace(tracePath)
			if err != nil {
				return fmt.Errorf("loadgen: %w", err)
			}
			if n := workload.NumRequests(tr, cfg.Duplicate); n > maxLoadRequests {
				return fmt.Errorf("loadgen: --duplicate %d makes %d requests, about %.0f GB generated in memory before the run; at most %d requests (--duplicate %d with this trace)",
					cfg.Duplicate, n, float64(n)*loadRequestBytes/(1<<30), maxLoadRequests, maxLoadRequests/max(workload.NumRequests(tr, 1), 1))
			}
			pr, pf := newRunProgress(cmd, "loadgen", progress)
			if pr != nil {
				opts.Progress = pf
				opts.GenerateProgress = pr.named("loadgen: generating the workload")
				fmt.Fprintf(pr.line.w, "loadgen: generating the workload (%d trace records x %d)\n", len(tr.Records), cfg.Duplicate)
			}
			rep, err := node.LoadGen(cmd.Context(), target, tr, cfg, opts)
			pr.done()
			if err != nil {
				return err
			}
			if rep.Exhausted && rep.Elapsed < opts.Duration*9/10 && rep.Requests > 0 {
				// The rates hold, but a short run says little about a
				// steady state: tell how to make it last.
				perCopy := max(1, rep.Requests/max(cfg.Duplicate, 1))
				want := int(rep.MatchesPerSec*opts.Duration.Seconds())/perCopy + 1
				fmt.Fprintf(cmd.ErrOrStderr(), "loadgen: the workload ran out after %v of the %v --duration; --duplicate %d would last about %v (with more memory and generation time)\n",
					rep.Elapsed.Round(100*time.Millisecond), opts.Duration, want, opts.Duration)
			}
			if asJSON {
				b, err := json.Marshal(rep)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), rep.String())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "http://127.0.0.1:8585", "base URL of a running kvidx serve")
	f.StringVar(&tracePath, "trace", "", "Mooncake trace (.jsonl or .jsonl.gz); default: the embedded one")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "simulated workers")
	f.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "blocks each worker caches")
	f.IntVar(&cfg.Duplicate, "duplicate", cfg.Duplicate, "copies of each trace record")
	f.IntVar(&opts.Concurrency, "concurrency", opts.Concurrency, "concurrent match clients, one connection each")
	f.IntVar(&opts.Posters, "posters", 0, "event posters, one connection each (default: 4, at most --concurrency)")
	f.DurationVar(&opts.Duration, "duration", opts.Duration, "longest run")
	f.BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	f.BoolVar(&progress, "progress", false, "print progress on stderr even when it is not a terminal")
	return cmd
}
