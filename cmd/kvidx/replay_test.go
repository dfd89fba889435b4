package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
)

const fixtures = "../../testdata/replay"

func fixture(name string) string { return filepath.Join(fixtures, name) }

// runKvidx runs the command in-process and returns its stdout, stderr and error.
func runKvidx(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetIn(strings.NewReader(stdin))
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// statsOf parses the --stats line, the last line of stderr.
func statsOf(t *testing.T, stderr string) engine.Stats {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	var st engine.Stats
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &st); err != nil {
		t.Fatalf("stats line of stderr %q: %v", stderr, err)
	}
	return st
}

func TestReplayScenarios(t *testing.T) {
	tests := []struct {
		name, events string
		entries      int
		want         string // answer to local hashes [1,2,3]
	}{
		{"store then removed", "store_removed.ndjson", 0, `{"scores":[],"query_blocks":3}`},
		{"store then cleared", "store_cleared.ndjson", 0, `{"scores":[],"query_blocks":3}`},
		{"store then worker removed", "store_worker_removed.ndjson", 0, `{"scores":[],"query_blocks":3}`},
		{"other worker keeps its blocks", "two_workers.ndjson", 2, `{"scores":[{"worker_id":1,"dp_rank":0,"matched_blocks":2}],"query_blocks":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runKvidx(t, "", "replay", "--events", fixture(tt.events), "--queries", fixture("query_123.ndjson"), "--stats")
			if err != nil {
				t.Fatalf("replay: %v\nstderr: %s", err, stderr)
			}
			if stdout != tt.want+"\n" {
				t.Errorf("stdout %q, want %q", stdout, tt.want+"\n")
			}
			if st := statsOf(t, stderr); st.Entries != tt.entries {
				t.Errorf("entries %d, want %d (stats %+v)", st.Entries, tt.entries, st)
			}
		})
	}
}

// TestReplayGolden replays a log covering every event kind, DP ranks, a WAL
// dump line, two rejected events and blank lines, then answers local-hash,
// candidate, empty and token queries (plain and LoRA).
func TestReplayGolden(t *testing.T) {
	stdout, stderr, err := runKvidx(t, "", "replay", "--events", fixture("events.ndjson"), "--queries", fixture("queries.ndjson"), "--stats")
	if err != nil {
		t.Fatalf("replay: %v (rejected events must not fail the run)\nstderr: %s", err, stderr)
	}
	if want := readFixture(t, "expected.stdout"); stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	if want := readFixture(t, "expected.stderr"); stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
	if !strings.Contains(stderr, "kvidx replay: 2 events rejected: parent_not_found=1 invalid_sequence=1\n") {
		t.Errorf("stderr %q lacks the rejection summary", stderr)
	}
}

// TestFixtureTokenHashes guards the golden fixture: the blocks of workers 10
// and 11 must be the local hashes of the token queries in queries.ndjson.
func TestFixtureTokenHashes(t *testing.T) {
	evs, err := eventjson.DecodeBatch([]byte(readFixture(t, "events.ndjson")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64][]uint64{
		10: engine.LocalHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4, ""),
		11: engine.LocalHashes(nil, []uint32{1, 2, 3, 4}, 4, "sql"),
	}
	for _, ev := range evs {
		w, ok := want[ev.Worker.WorkerID]
		if !ok {
			continue
		}
		for i, b := range ev.Blocks {
			if b.TokensHash != w[i] {
				t.Errorf("worker %d block %d: tokens_hash %d, want %d", ev.Worker.WorkerID, i, b.TokensHash, w[i])
			}
		}
		delete(want, ev.Worker.WorkerID)
	}
	if len(want) != 0 {
		t.Errorf("no events for workers %v", want)
	}
}

func TestReplayStdin(t *testing.T) {
	want := readFixture(t, "expected.stdout")
	t.Run("events", func(t *testing.T) {
		stdout, _, err := runKvidx(t, readFixture(t, "events.ndjson"), "replay", "--events", "-", "--queries", fixture("queries.ndjson"))
		if err != nil || stdout != want {
			t.Errorf("err %v, stdout:\n%s\nwant:\n%s", err, stdout, want)
		}
	})
	t.Run("queries", func(t *testing.T) {
		// No final newline: the last line still counts.
		queries := strings.TrimSuffix(readFixture(t, "queries.ndjson"), "\n")
		stdout, _, err := runKvidx(t, queries, "replay", "--events", fixture("events.ndjson"), "--queries", "-")
		if err != nil || stdout != want {
			t.Errorf("err %v, stdout:\n%s\nwant:\n%s", err, stdout, want)
		}
	})
}

func TestReplayMalformedLines(t *testing.T) {
	// Lines 2 and 3 do not parse; line 4 must still apply after them.
	queries := `{"local_hashes":[101,102]}` + "\n" + `{"local_hashes":[-1]}` + "\n" + `{"tokens":[1]}` + "\n" + `{"local_hashes":[101]}` + "\n"
	stdout, stderr, err := runKvidx(t, queries, "replay", "--events", fixture("malformed.ndjson"), "--queries", "-")
	if err == nil {
		t.Fatal("replay succeeded; want an error for the malformed lines")
	}
	if !strings.Contains(err.Error(), "4 lines did not parse (events 2, queries 2)") {
		t.Errorf("error %q", err)
	}
	for _, want := range []string{
		"kvidx replay: events line 2: event.data: unknown kind \"bogus\"\n",
		"kvidx replay: events line 3: event.data.stored.blocks[0].tokens_hash: negative number -102",
		"kvidx replay: queries line 2: local_hashes[0]: negative number -1",
		"kvidx replay: queries line 3: block_size: required with tokens",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	want := `{"scores":[{"worker_id":7,"dp_rank":0,"matched_blocks":2}],"query_blocks":2}` + "\n" +
		`{"error":"queries line 2: local_hashes[0]: negative number -1, want an unsigned integer"}` + "\n" +
		`{"error":"queries line 3: block_size: required with tokens"}` + "\n" +
		`{"scores":[{"worker_id":7,"dp_rank":0,"matched_blocks":1}],"query_blocks":1}` + "\n"
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant one line per query line:\n%s", stdout, want)
	}
}

func TestReplayUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no events", []string{"replay"}, `"events" not set`},
		{"both stdin", []string{"replay", "--events", "-", "--queries", "-"}, "cannot both read stdin"},
		{"missing events file", []string{"replay", "--events", fixture("nope.ndjson")}, "nope.ndjson"},
		{"missing queries file", []string{"replay", "--events", fixture("events.ndjson"), "--queries", fixture("nope.ndjson")}, "nope.ndjson"},
		{"positional", []string{"replay", "--events", fixture("events.ndjson"), "extra"}, "unknown command"},
		{"events a directory", []string{"replay", "--events", fixture("")}, "is a directory, want a file"},
		{"queries a directory", []string{"replay", "--events", fixture("events.ndjson"), "--queries", fixture("")}, "is a directory, want a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := runKvidx(t, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}

func TestReplayWithoutQueries(t *testing.T) {
	stdout, stderr, err := runKvidx(t, "", "replay", "--events", fixture("two_workers.ndjson"))
	if err != nil || stdout != "" || stderr != "" {
		t.Fatalf("err %v, stdout %q, stderr %q; want silence", err, stdout, stderr)
	}
}

// A producer that writes the events pipe to the end and then the queries
// pipe (one process feeding two named pipes) must not deadlock replay:
// the queries pipe is opened only once the events are read.
func TestReplayTwoNamedPipes(t *testing.T) {
	dir := t.TempDir()
	evPath, qPath := filepath.Join(dir, "events"), filepath.Join(dir, "queries")
	for _, p := range []string{evPath, qPath} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skip("mkfifo:", err)
		}
	}
	// More than a pipe buffer (64 KiB) of events.
	var sb strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&sb, `{"worker_id":%d,"event":{"data":{"stored":{"blocks":[{"block_hash":%d,"tokens_hash":101}]}}}}`+"\n", i, i)
	}
	events := sb.String()
	writer := func() {
		f, err := os.OpenFile(evPath, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		f.WriteString(events)
		f.Close()
		q, err := os.OpenFile(qPath, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		q.WriteString(`{"local_hashes":[101],"candidates":[{"worker_id":3000}]}` + "\n")
		q.Close()
	}
	go writer()

	type result struct {
		stdout string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		stdout, _, err := runKvidx(t, "", "replay", "--events", evPath, "--queries", qPath)
		done <- result{stdout, err}
	}()
	select {
	case r := <-done:
		want := `{"scores":[{"worker_id":3000,"dp_rank":0,"matched_blocks":1}],"query_blocks":1}` + "\n"
		if r.err != nil || r.stdout != want {
			t.Fatalf("err %v, stdout %q, want %q", r.err, r.stdout, want)
		}
	case <-time.After(10 * time.Second):
		// Unblock the stuck open so the test binary can exit.
		if f, err := os.OpenFile(qPath, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		if f, err := os.OpenFile(evPath, os.O_RDONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("replay deadlocked: it opens the --queries pipe before reading --events, while the writer is blocked writing --events")
	}
}
