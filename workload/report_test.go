package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

func TestBenchMatchesRun(t *testing.T) {
	tr := embeddedTrace(t)
	tr.Records = tr.Records[:400]
	cfg := BenchConfig{Config: Config{Workers: 16, Capacity: 256, Duplicate: 2}, HeapMarks: []int64{1000, 5000, 1 << 40}, Verify: true}

	rep, err := Bench(context.Background(), tr, cfg, nil)
	if err != nil {
		t.Fatalf("Bench: %v", err)
	}

	// The same workload through Run gives the same counts.
	ix := engine.New()
	var events, blockOps int64
	var matched, blocks int
	err = Run(context.Background(), ix, tr, cfg.Config, func(req Request, evs []engine.Event) error {
		events += int64(len(evs))
		blockOps += int64(BlockOps(evs))
		matched += req.Matched
		blocks += req.Blocks()
		return nil
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := ix.Stats()
	if st.Counters.BlocksRemoved == 0 {
		t.Fatal("workload evicts nothing; the test needs churn")
	}
	if got, want := uint64(blockOps), st.Counters.BlocksStored+st.Counters.BlocksRemoved; got != want {
		t.Errorf("block ops %d, index counts %d stored + removed", got, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"requests", rep.Requests, NumRequests(tr, 2)},
		{"events", rep.Events, events},
		{"block_ops", rep.BlockOps, blockOps},
		{"entries", rep.Entries, ix.Len()},
		{"holder_blocks", rep.HolderBlocks, st.HolderBlocks},
		{"prefix_hit_rate", rep.PrefixHitRate, round(float64(matched)/float64(blocks), 6)},
		{"verified", rep.Verified, true},
		{"verify", rep.VerifyErr, error(nil)},
		{"marks reached", []bool{rep.HeapMarks[0].Reached, rep.HeapMarks[1].Reached, rep.HeapMarks[2].Reached}, []bool{true, true, false}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if rep.ApplyBlockOpsPerS <= 0 || rep.LookupP50us <= 0 || rep.LookupP99us < rep.LookupP50us {
		t.Errorf("timings: apply %v/s, lookup p50 %v p99 %v", rep.ApplyBlockOpsPerS, rep.LookupP50us, rep.LookupP99us)
	}
	// A reserved index gives the same run.
	rcfg := cfg
	rcfg.Reserve = true
	rrep, err := Bench(context.Background(), tr, rcfg, nil)
	if err != nil {
		t.Fatalf("Bench, reserved: %v", err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"requests", rrep.Requests, rep.Requests},
		{"events", rrep.Events, rep.Events},
		{"block_ops", rrep.BlockOps, rep.BlockOps},
		{"entries", rrep.Entries, rep.Entries},
		{"holder_blocks", rrep.HolderBlocks, rep.HolderBlocks},
		{"prefix_hit_rate", rrep.PrefixHitRate, rep.PrefixHitRate},
		{"verify", rrep.VerifyErr, error(nil)},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("reserved: %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if m := rep.HeapMarks[0]; m.BlockOps < 1000 || m.HeapBytes == 0 {
		t.Errorf("heap mark %+v", m)
	}

	// JSON has exactly the documented keys.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"requests", "events", "block_ops", "apply_block_ops_per_s", "lookup_p50_us", "lookup_p99_us",
		"entries", "holder_blocks", "heap_bytes_per_holder_block", "prefix_hit_rate"}
	if got := slices.Sorted(maps.Keys(obj)); !slices.Equal(got, slices.Sorted(slices.Values(wantKeys))) {
		t.Errorf("JSON keys %v, want %v", got, wantKeys)
	}

	var table, marks bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHeapMarks(&marks); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"prefix hit rate", "lookup p99", "holder blocks"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	for _, s := range []string{"not reached", "heap growth 1,000 -> 1,099,511,627,776", "n/a", "empty entries (Verify)"} {
		if !strings.Contains(marks.String(), s) {
			t.Errorf("heap marks lack %q:\n%s", s, marks.String())
		}
	}
}

func TestBenchConfigValidate(t *testing.T) {
	tests := []struct {
		marks []int64
		ok    bool
	}{
		{nil, true},
		{[]int64{2_000_000, 10_000_000}, true},
		{[]int64{0}, false},
		{[]int64{5, 5}, false},
		{[]int64{10, 5}, false},
	}
	for _, tc := range tests {
		err := BenchConfig{Config: DefaultConfig(), HeapMarks: tc.marks}.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("marks %v: error %v, want ok=%v", tc.marks, err, tc.ok)
		}
	}
	if _, err := Bench(context.Background(), &Trace{}, BenchConfig{}, nil); err == nil {
		t.Error("Bench with a zero config: want error")
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{d[:1], 0.99, 1},
		{d, 0.5, 5},
		{d, 0.99, 10},
		{d, 0.1, 1},
		{d, 0, 1},
	}
	for _, tc := range tests {
		if got := percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
		}
	}
}

func TestHeapGrowthPct(t *testing.T) {
	tests := []struct {
		marks []HeapMark
		want  float64
		ok    bool
	}{
		{nil, 0, false},
		{[]HeapMark{{Reached: true, HeapBytes: 100}}, 0, false},
		{[]HeapMark{{Reached: true, HeapBytes: 100}, {Reached: true, HeapBytes: 104}}, 4, true},
		{[]HeapMark{{Reached: true, HeapBytes: 100}, {Reached: false}}, 0, false},
	}
	for _, tc := range tests {
		got, ok := HeapGrowthPct(tc.marks)
		if got != tc.want || ok != tc.ok {
			t.Errorf("HeapGrowthPct(%v) = %v, %v; want %v, %v", tc.marks, got, ok, tc.want, tc.ok)
		}
	}
}

// A huge duplicate must not reserve memory for every request's latency up
// front: Bench starts, sees the cancelled context and returns its error.
func TestBenchHugeDuplicateStartsSmall(t *testing.T) {
	tr := embeddedTrace(t)
	tr.Records = tr.Records[:400]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, dup := range []int{1 << 20, 1 << 30, 1 << 40} {
		cfg := BenchConfig{Config: Config{Workers: 16, Capacity: 256, Duplicate: dup}}
		if _, err := Bench(ctx, tr, cfg, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("duplicate %d: Bench = %v, want context.Canceled", dup, err)
		}
	}
}
