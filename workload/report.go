package workload

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a [Bench] run. Its JSON form (the tagged fields)
// is `kvidx bench --json`.
type Report struct {
	Requests int   `json:"requests"`
	Events   int64 `json:"events"`
	// BlockOps counts blocks of Stored events plus hashes of Removed events.
	BlockOps int64 `json:"block_ops"`
	// ApplyBlockOpsPerS is BlockOps over the total time spent inside Apply.
	ApplyBlockOpsPerS float64 `json:"apply_block_ops_per_s"`
	// LookupP50us and LookupP99us are percentiles of per-request Match
	// durations, in microseconds.
	LookupP50us float64 `json:"lookup_p50_us"`
	LookupP99us float64 `json:"lookup_p99_us"`
	// Entries is ix.Len() and HolderBlocks is Stats().HolderBlocks at the end.
	Entries      int `json:"entries"`
	HolderBlocks int `json:"holder_blocks"`
	// HeapBytesPerHolderBlock is IndexHeapBytes / HolderBlocks.
	HeapBytesPerHolderBlock float64 `json:"heap_bytes_per_holder_block"`
	// PrefixHitRate is the sum of the chosen workers' scores over the sum of
	// the requests' blocks.
	PrefixHitRate float64 `json:"prefix_hit_rate"`

	// Config is the workload that ran.
	Config Config `json:"-"`
	// Elapsed is the wall time of the replay; ApplyTime and MatchTime the
	// parts spent inside Apply and Match.
	Elapsed   time.Duration `json:"-"`
	ApplyTime time.Duration `json:"-"`
	MatchTime time.Duration `json:"-"`
	// IndexHeapBytes is the heap in use after GC with the final index alive
	// minus the same with it dropped.
	IndexHeapBytes int64 `json:"-"`
	// HeapMarks are the heap measurements asked for by BenchConfig.HeapMarks.
	HeapMarks []HeapMark `json:"-"`
	// Verified tells whether [engine.Index.Verify] ran on the final index
	// (BenchConfig.Verify), and VerifyErr is its result (nil: no empty entry,
	// every holder consistent).
	Verified  bool  `json:"-"`
	VerifyErr error `json:"-"`
}

// WriteTable writes the report as an aligned, human-readable table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := r.Config
	rows := [][2]string{
		{"workload", fmt.Sprintf("%d workers x %d blocks, duplicate %d", c.Workers, c.Capacity, c.Duplicate)},
		{"requests", group(r.Requests)},
		{"events", group(r.Events)},
		{"block ops", group(r.BlockOps)},
		{"apply", fmt.Sprintf("%s block ops/s (%.3fs in Apply)", group(int64(r.ApplyBlockOpsPerS)), r.ApplyTime.Seconds())},
		{"lookup p50", fmt.Sprintf("%.3f µs", r.LookupP50us)},
		{"lookup p99", fmt.Sprintf("%.3f µs (%.3fs in Match)", r.LookupP99us, r.MatchTime.Seconds())},
		{"entries", group(r.Entries)},
		{"holder blocks", group(r.HolderBlocks)},
		{"heap / holder block", fmt.Sprintf("%.1f bytes (index %s)", r.HeapBytesPerHolderBlock, mib(r.IndexHeapBytes))},
		{"prefix hit rate", fmt.Sprintf("%.4f", r.PrefixHitRate)},
		{"elapsed", r.Elapsed.Round(time.Millisecond).String()},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

// WriteHeapMarks writes the heap marks, the growth between the first and the
// last, and the Verify outcome (if it ran).
func (r *Report) WriteHeapMarks(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range r.HeapMarks {
		if !m.Reached {
			fmt.Fprintf(tw, "heap mark %s block ops\tnot reached (run has %s; raise --duplicate)\n", group(m.Target), group(r.BlockOps))
			continue
		}
		fmt.Fprintf(tw, "heap mark %s block ops\t%s (at %s block ops)\n", group(m.Target), mib(int64(m.HeapBytes)), group(m.BlockOps))
	}
	if n := len(r.HeapMarks); n >= 2 {
		first, last := r.HeapMarks[0], r.HeapMarks[n-1]
		if g, ok := HeapGrowthPct(r.HeapMarks); ok {
			fmt.Fprintf(tw, "heap growth %s -> %s\t%+.2f%%\n", group(first.Target), group(last.Target), g)
		} else {
			fmt.Fprintf(tw, "heap growth %s -> %s\tn/a (mark not reached)\n", group(first.Target), group(last.Target))
		}
	}
	switch {
	case !r.Verified:
	case r.VerifyErr == nil:
		fmt.Fprintf(tw, "empty entries (Verify)\t0\n")
	default:
		fmt.Fprintf(tw, "Verify\tFAILED: %v\n", r.VerifyErr)
	}
	return tw.Flush()
}

// group formats n with thousands separators.
func group[T int | int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
