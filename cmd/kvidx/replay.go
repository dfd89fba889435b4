package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
)

type replayOptions struct {
	events, queries string
	stats           bool
}

func newReplayCmd() *cobra.Command {
	var opts replayOptions
	cmd := &cobra.Command{
		Use:   "replay --events FILE [--queries FILE] [--stats]",
		Short: "Apply an event log to a fresh index and answer prefix queries",
		Long: `Replay applies every KV-cache event of FILE, in order, to a fresh in-memory
index, then answers each query of the queries file with one result line on
stdout. Both files are NDJSON (one JSON object per line; blank lines are
skipped); "-" reads stdin, and a file may be a pipe: it is read once, streaming.

Events have the shape of NVIDIA Dynamo's RouterEvent:

  {"worker_id":7,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":11,"tokens_hash":101}]}}}}
  {"worker_id":7,"event":{"event_id":2,"dp_rank":0,"data":{"removed":{"block_hashes":[11]}}}}
  {"worker_id":7,"event":{"event_id":3,"dp_rank":0,"data":"cleared"}}
  {"worker_id":7,"event":{"event_id":4,"dp_rank":0,"data":"worker_removed"}}

A query names a prefix by local block hashes or by token ids, and may restrict
scoring to some worker keys:

  {"local_hashes":[101,102]}
  {"tokens":[1,2,3,4,5,6,7,8],"block_size":4,"lora_name":"my-adapter"}
  {"local_hashes":[101,102],"candidates":[{"worker_id":7,"dp_rank":0}]}

(a candidate's dp_rank defaults to 0; "candidates":[] scores nobody) and is
answered, best first, with

  {"scores":[{"worker_id":7,"dp_rank":0,"matched_blocks":2}],"query_blocks":2}

--stats prints {"entries":...,"holder_blocks":...,"worker_keys":...,"counters":{...}}
on stderr at the end, after the queries (the index the queries saw).

Events the index rejects (a parent block the worker does not hold, an invalid
sequence) change nothing; they are counted and summarised on stderr, and the
exit status stays 0. A line that is not valid JSON of the expected shape is
reported on stderr with its line number and skipped; the exit status is then
non-zero. A query line that does not parse is also answered on stdout, with
{"error":"queries line N: ..."}, so that output line n always answers the
nth (non-blank) query line.`,
		Example: `  # Replay a log and answer queries, printing index statistics on stderr.
  kvidx replay --events events.ndjson --queries queries.ndjson --stats

  # Stream a compressed log through stdin.
  zcat events.ndjson.gz | kvidx replay --events - --queries queries.ndjson`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplay(cmd, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.events, "events", "", "NDJSON `FILE` of events to apply (- for stdin)")
	f.StringVar(&opts.queries, "queries", "", "NDJSON `FILE` of queries to answer after the events (- for stdin)")
	f.BoolVar(&opts.stats, "stats", false, "print the index statistics as one JSON line on stderr at the end")
	_ = cmd.MarkFlagRequired("events")
	return cmd
}

func runReplay(cmd *cobra.Command, opts replayOptions) error {
	if opts.events == "-" && opts.queries == "-" {
		return errors.New("replay: --events and --queries cannot both read stdin")
	}
	// Check the queries path before the (possibly long) replay, so that a
	// typo fails at once; but open it only once the events are read: opening
	// a named pipe blocks until its writer opens it, and a writer that fills
	// the events pipe first would wait for replay while replay waited for it.
	if opts.queries != "" && opts.queries != "-" {
		if _, err := os.Stat(opts.queries); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	events, err := openInput(cmd, opts.events)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer events.Close()

	rep := newReporter(cmd.ErrOrStderr())
	ix := engine.New()
	badEvents, rejected, err := applyEvents(ix, events, rep)
	if err != nil {
		return fmt.Errorf("replay: events: %w", err)
	}
	var badQueries int
	if opts.queries != "" {
		queries, err := openInput(cmd, opts.queries)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		defer queries.Close()
		out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
		badQueries, err = answerQueries(ix, queries, out, rep)
		if ferr := out.Flush(); err == nil && ferr != nil {
			err = fmt.Errorf("writing results: %w", ferr)
		}
		if err != nil {
			return fmt.Errorf("replay: queries: %w", err)
		}
	}

	if line := rejectionSummary(rejected); line != "" {
		rep.printf("%s", line)
	}
	if opts.stats {
		b, err := json.Marshal(ix.Stats())
		if err != nil {
			return fmt.Errorf("replay: stats: %w", err)
		}
		rep.printf("%s", b)
	}
	if badEvents+badQueries > 0 {
		return fmt.Errorf("replay: %s did not parse (events %d, queries %d)", plural(badEvents+badQueries, "line"), badEvents, badQueries)
	}
	return nil
}

// openInput opens name for reading, "-" being the command's stdin (which the
// caller must not close, hence the no-op Close).
func openInput(cmd *cobra.Command, name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(cmd.InOrStdin()), nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	// A directory opens, and fails only at its first read ("after line
	// 0: ... is a directory"): say so at once.
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: is a directory, want a file (or - for stdin)", name)
	}
	return f, nil
}

// applyEvents applies every line of r to ix. It returns how many lines did not
// parse and how many events the index rejected, per reason; err is a read error.
func applyEvents(ix *engine.Index, r io.Reader, rep *reporter) (bad int, rejected map[string]int, err error) {
	rejected = map[string]int{}
	var (
		dec    eventjson.Decoder
		ev     engine.Event
		blocks uint64
	)
	lr := eventjson.NewLineReader(r)
	for n := 0; lr.Scan(); n++ {
		if err := dec.Decode(lr.Bytes(), &ev); err != nil {
			rep.printf("kvidx replay: events line %d: %v", lr.Line(), err)
			bad++
			continue
		}
		if err := ix.Apply(&ev); err != nil {
			reason := engine.RejectReason(err)
			if reason == "" {
				reason = "other"
			}
			rejected[reason]++
		}
		blocks += uint64(len(ev.Blocks))
		if n%1024 == 0 {
			rep.progress(lr.Line(), blocks)
		}
	}
	rep.endProgress()
	return bad, rejected, lr.Err()
}

// answerQueries writes one line to w for every query line of r: its result,
// or {"error":"..."} when the line does not parse, so that a program reading
// the results pairs the nth output line with the nth query. It returns how
// many lines did not parse.
func answerQueries(ix *engine.Index, r io.Reader, w io.Writer, rep *reporter) (bad int, err error) {
	var buf []byte
	lr := eventjson.NewLineReader(r)
	for lr.Scan() {
		q, err := eventjson.DecodeQuery(lr.Bytes())
		if err != nil {
			msg := fmt.Sprintf("queries line %d: %v", lr.Line(), err)
			rep.printf("kvidx replay: %s", msg)
			bad++
			buf, _ = json.Marshal(struct {
				Error string `json:"error"`
			}{msg})
		} else {
			buf = eventjson.AppendResult(buf[:0], q.Match(ix), len(q.LocalHashes))
		}
		if _, err := w.Write(append(buf, '\n')); err != nil {
			return bad, fmt.Errorf("writing results: %w", err)
		}
	}
	return bad, lr.Err()
}

// rejectionSummary renders the rejection counts, the engine's reasons first
// in its order, or "" when nothing was rejected.
func rejectionSummary(rejected map[string]int) string {
	total := 0
	reasons := make([]string, 0, len(rejected))
	for r, n := range rejected {
		total += n
		reasons = append(reasons, r)
	}
	if total == 0 {
		return ""
	}
	order := []string{
		engine.RejectReason(engine.ErrParentNotFound),
		engine.RejectReason(engine.ErrInvalidSequence),
		engine.RejectReason(engine.ErrInvalidEvent),
	}
	rank := func(r string) int {
		if i := slices.Index(order, r); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "kvidx replay: %s rejected:", plural(total, "event"))
	for _, r := range reasons {
		fmt.Fprintf(&sb, " %s=%d", r, rejected[r])
	}
	return sb.String()
}

// plural returns "1 event", "2 events".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
