package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runBench runs kvidx with the command line args and returns stdout, stderr and the error.
func runBench(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func writeBenchTrace(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBenchFlagErrors(t *testing.T) {
	good := writeBenchTrace(t, `{"timestamp": 0, "hash_ids": [1, 2, 3]}`)
	bad := writeBenchTrace(t, `{"hash_ids": [1]}`, `{"hash_ids": [1,`)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--workers", "0"}, "workers must be >= 1"},
		{[]string{"bench", "--capacity", "-1"}, "capacity must be >= 1"},
		{[]string{"bench", "--duplicate", "0"}, "duplicate must be >= 1"},
		{[]string{"bench", "--heap-marks", "10,5"}, "ascending"},
		{[]string{"bench", "--heap-marks", "x"}, "invalid argument"},
		{[]string{"bench", "--trace", filepath.Join(t.TempDir(), "missing")}, "no such file"},
		{[]string{"bench", "--trace", bad}, "line 2"},
		{[]string{"bench", "--trace", good, "extra"}, "unknown command"},
	}
	for _, tc := range tests {
		_, _, err := runBench(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kvidx %v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestBenchJSON(t *testing.T) {
	trace := writeBenchTrace(t,
		`{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}`,
		`{"timestamp": 1, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 4]}`,
		`{"timestamp": 2, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 3, 5]}`,
	)
	out, errOut, err := runBench(t, "bench", "--trace", trace, "--workers", "2", "--capacity", "4",
		"--duplicate", "3", "--json", "--heap-marks", "1,10")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	want := []string{"apply_block_ops_per_s", "block_ops", "entries", "events", "heap_bytes_per_holder_block",
		"holder_blocks", "lookup_p50_us", "lookup_p99_us", "prefix_hit_rate", "requests"}
	if got := slices.Sorted(maps.Keys(rep)); !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	if rep["requests"] != 9.0 {
		t.Errorf("requests = %v, want 9", rep["requests"])
	}
	for _, s := range []string{"heap mark 1 block ops", "heap growth 1 -> 10", "empty entries (Verify)"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errOut)
		}
	}
	if strings.Contains(errOut, "requests (") {
		t.Errorf("progress printed on a non-terminal without --progress:\n%s", errOut)
	}
}

func TestBenchTable(t *testing.T) {
	trace := writeBenchTrace(t, `{"hash_ids": [1, 2, 3]}`, `{"hash_ids": []}`, `{"hash_ids": [1, 2]}`)
	out, _, err := runBench(t, "bench", "--trace", trace, "--workers", "1", "--capacity", "2", "--duplicate", "1")
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	for _, s := range []string{"requests             2", "prefix hit rate", "lookup p50"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

// Every command's --help shows a default only where there is one: pflag
// printed "(default [])" for an int64 list left empty (--heap-marks).
func TestHelpShowsNoEmptyDefault(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if usage := c.LocalFlags().FlagUsages(); strings.Contains(usage, "(default [])") {
			t.Errorf("%s --help shows an empty default:\n%s", c.CommandPath(), usage)
		}
	}
	walk(newRootCmd())
}

// A bench cut short by its context (SIGINT or SIGTERM) says so in a word,
// and prints no report (found by review: "kvidx: bench: context
// canceled", and SIGTERM killed it without one).
func TestBenchInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"bench", "--duplicate", "1"})
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(ctx)
	if err == nil || err.Error() != "bench: interrupted, no report" {
		t.Fatalf("bench with its context done: %v; want \"bench: interrupted, no report\"", err)
	}
	if out.Len() != 0 {
		t.Errorf("interrupted bench printed a report:\n%s", out.String())
	}
}
