package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

func newInspectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Look inside snapshots and data directories without a running server",
		Long: `Inspect reads snapshot files and data directories read-only: it never takes
the writer lock, never repairs or truncates anything, and is safe on the
directory of a running server.`,
	}
	cmd.AddCommand(newInspectSummaryCmd(), newInspectEntriesCmd(), newInspectVerifyCmd(),
		newInspectDiffCmd(), newInspectMatchCmd())
	return commandGroup(cmd)
}

// ---- summary ----

// depthBucket counts places and holder-blocks at positions From..To.
type depthBucket struct {
	From         uint32 `json:"from"`
	To           uint32 `json:"to"`
	Places       int    `json:"places"`
	HolderBlocks int    `json:"holder_blocks"`
}

// bucketOf returns the depth bucket of a position: 0-7, 8-15, 16-31, 32-63, ...
func bucketOf(pos uint32) int {
	if pos < 8 {
		return 0
	}
	b := 0
	for p := pos >> 3; p > 0; p >>= 1 {
		b++
	}
	return b
}

func bucketRange(b int) (from, to uint32) {
	if b == 0 {
		return 0, 7
	}
	from = uint32(8) << (b - 1)
	if b >= 29 {
		return from, math.MaxUint32
	}
	return from, uint32(8)<<b - 1
}

type workerCount struct {
	WorkerID uint64 `json:"worker_id"`
	DPRank   uint32 `json:"dp_rank"`
	Blocks   int    `json:"blocks"`
}

type snapshotInfo struct {
	File     string            `json:"file"`
	WALIndex uint64            `json:"wal_index"`
	Created  string            `json:"created"`
	Format   int               `json:"format"`
	HashSeed uint64            `json:"hash_seed"`
	SeqRule  string            `json:"seq_rule"`
	Chunks   int               `json:"chunks"`
	Checksum string            `json:"checksum"`
	Sources  []snapshot.Source `json:"sources"`
}

// summary is `kvidx inspect summary`'s report. Its first keys are those of
// engine.Stats (as `kvidx replay --stats` prints them).
type summary struct {
	Entries             int                    `json:"entries"`
	HolderBlocks        int                    `json:"holder_blocks"`
	WorkerKeys          int                    `json:"worker_keys"`
	Counters            engine.Counters        `json:"counters"`
	Places              int                    `json:"places"`
	Bytes               int64                  `json:"bytes"`
	BytesPerHolderBlock float64                `json:"bytes_per_holder_block"`
	Snapshot            *snapshotInfo          `json:"snapshot,omitempty"`
	Recovery            *recovery.RecoveryPlan `json:"recovery,omitempty"`
	ReplayedEvents      *uint64                `json:"replayed_events,omitempty"`
	Workers             []workerCount          `json:"workers"`
	Depth               []depthBucket          `json:"depth"`
}

// summarizer accumulates the place-level parts of a summary.
type summarizer struct {
	places  int
	depth   []depthBucket
	workers map[engine.WorkerKey]int
}

func (s *summarizer) add(rec *engine.PlaceRecord) {
	s.places++
	b := bucketOf(rec.Position)
	for len(s.depth) <= b {
		from, to := bucketRange(len(s.depth))
		s.depth = append(s.depth, depthBucket{From: from, To: to})
	}
	d := &s.depth[b]
	d.Places++
	for _, h := range rec.Holders {
		d.HolderBlocks += len(h.BlockHashes)
		s.workers[h.Worker] += len(h.BlockHashes)
	}
}

func (s *summarizer) workerList() []workerCount {
	out := make([]workerCount, 0, len(s.workers))
	for k, n := range s.workers {
		out = append(out, workerCount{WorkerID: k.WorkerID, DPRank: k.DPRank, Blocks: n})
	}
	slices.SortFunc(out, func(a, b workerCount) int {
		if a.WorkerID != b.WorkerID {
			if a.WorkerID < b.WorkerID {
				return -1
			}
			return 1
		}
		return int(a.DPRank) - int(b.DPRank)
	})
	return out
}

func newInspectSummaryCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "summary FILE|DATA_DIR",
		Short: "Summarise a snapshot, or what a data directory would recover to",
		Long: `Summary prints a snapshot's meta (WAL index, creation time, format, hashing
parameters, source positions), its entry, holder-block, worker-key and place
counts, the blocks each worker key holds, a histogram of places and
holder-blocks by position (depth: 0-7, 8-15, 16-31, ...), the file size and
bytes per holder-block. The file is streamed, not loaded.

Given a data directory, it reports what a restart would recover: it picks the
snapshot recovery would pick (newest that verifies and that the WAL reaches
back to), loads it, applies the WAL entries after it (read-only), and
summarises the result; bytes are then the chosen snapshot's plus the WAL's.
It works when no snapshot exists yet (full WAL replay).

Nothing is changed: safe on a running server's directory.`,
		Example: `  kvidx inspect summary ./kvidx-data/snapshots/snapshot-00000000000000041234.bolt
  kvidx inspect summary ./kvidx-data --json | jq .holder_blocks`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			dir, err := isDataDir(args[0])
			if err != nil {
				return fmt.Errorf("inspect summary: %w", err)
			}
			var s *summary
			if dir {
				s, err = summarizeDataDir(ctx, cmd, args[0])
			} else {
				s, err = summarizeSnapshot(ctx, cmd, args[0])
			}
			if err != nil {
				return fmt.Errorf("inspect summary: %w", err)
			}
			if s.HolderBlocks > 0 {
				s.BytesPerHolderBlock = math.Round(100*float64(s.Bytes)/float64(s.HolderBlocks)) / 100
			}
			if s.Depth == nil {
				s.Depth = []depthBucket{}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, s)
			}
			return writeSummaryText(out, s)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	return cmd
}

// writeJSON writes v as JSON indented by two spaces, then a newline: the
// --json form of the reports that are one JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func snapInfo(path string, m snapshot.Meta) *snapshotInfo {
	src := m.Sources
	if src == nil {
		src = []snapshot.Source{}
	}
	return &snapshotInfo{
		File: filepath.Base(path), WALIndex: m.Index, Created: m.Created.UTC().Format(time.RFC3339Nano),
		Format: m.Version, HashSeed: engine.Seed, SeqRule: snapshot.SeqRule, Chunks: m.Chunks,
		Checksum: fmt.Sprintf("%08x", m.Checksum), Sources: src,
	}
}

func summarizeSnapshot(ctx context.Context, cmd *cobra.Command, path string) (*summary, error) {
	r, err := snapshot.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	m := r.Meta()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	sz := &summarizer{workers: map[engine.WorkerKey]int{}}
	for _, k := range r.Workers() {
		sz.workers[k] = 0
	}
	prog := newBar(cmd.ErrOrStderr(), int64(m.Places), "reading places", false)
	err = r.Scan(ctx, 0, math.MaxUint32, nil, func(rec *engine.PlaceRecord) bool {
		sz.add(rec)
		if sz.places&1023 == 0 {
			prog.add(1024)
		}
		return true
	})
	prog.done()
	if err != nil {
		return nil, err
	}
	return &summary{
		Entries: m.Stats.Entries, HolderBlocks: m.Stats.HolderBlocks, WorkerKeys: m.Stats.WorkerKeys,
		Counters: m.Stats.Counters, Places: sz.places, Bytes: fi.Size(),
		Snapshot: snapInfo(path, m), Workers: sz.workerList(), Depth: sz.depth,
	}, nil
}

func summarizeDataDir(ctx context.Context, cmd *cobra.Command, dir string) (*summary, error) {
	var (
		p      *recovery.RecoveryPlan
		ix     *engine.Index
		events uint64
		err    error
	)
	// On a running server's directory the WAL's front can be truncated
	// (a newer snapshot published, an older one pruned) between the plan
	// and the replay: the server at work, not a defect; plan again.
	for attempt := 1; ; attempt++ {
		p, ix, err = planRecovery(ctx, dir, true, cmd.ErrOrStderr())
		if err != nil {
			return nil, err
		}
		if p.Refusal != "" {
			return nil, fmt.Errorf("data dir %s: a restart would refuse to start: %s", dir, p.Refusal)
		}
		if p.Format == 0 && p.WAL.Segments == 0 && p.SnapshotUsed == nil && len(p.Skipped) == 0 {
			// An empty summary of a mistyped path would read as an empty index.
			fmt.Fprintf(cmd.ErrOrStderr(), "kvidx inspect: %s holds no kvidx data (no %s file, WAL or snapshot): a server would start a new index there\n", dir, recovery.FormatFileName)
		}
		prog := newBar(cmd.ErrOrStderr(), int64(p.ReplayEntries), "replaying WAL", false)
		events, _, err = p.Replay(dir, ix, func() { prog.add(1) })
		prog.done()
		if err == nil {
			break
		}
		if !errors.Is(err, wal.ErrTruncated) || ctx.Err() != nil {
			return nil, err
		}
		if attempt == recovery.PlanAttempts {
			return nil, fmt.Errorf("data dir %s: the WAL was truncated while it was read, %d times in a row (a running server snapshotting often: its directory is fine); try again, or inspect a copy: %w", dir, recovery.PlanAttempts, err)
		}
	}
	st := ix.Stats()
	s := &summary{
		Entries: st.Entries, HolderBlocks: st.HolderBlocks, WorkerKeys: st.WorkerKeys, Counters: st.Counters,
		Recovery: p, ReplayedEvents: &events, Bytes: p.WAL.Bytes,
	}
	if p.SnapshotUsed != nil {
		s.Bytes += p.SnapshotUsed.Bytes
		s.Snapshot = snapInfo(p.SnapshotUsed.File, p.SnapshotUsed.Meta)
	}
	sz := &summarizer{workers: map[engine.WorkerKey]int{}}
	for _, wb := range ix.Workers() {
		sz.workers[wb.Worker] = 0
	}
	f := ix.Freeze()
	f.Places(func(rec *engine.PlaceRecord) bool {
		sz.add(rec)
		return true
	})
	f.Release(ix)
	s.Places, s.Workers, s.Depth = sz.places, sz.workerList(), sz.depth
	return s, nil
}

func writeSummaryText(w io.Writer, s *summary) error {
	bw := bufio.NewWriter(w)
	row := func(k string, v any) { fmt.Fprintf(bw, "%-24s %v\n", k, v) }
	if p := s.Recovery; p != nil {
		if p.SnapshotUsed != nil {
			row("recovered from", fmt.Sprintf("%s + WAL entries %s", p.SnapshotUsed.File, rangeText(p.ReplayFrom, p.ReplayTo, p.ReplayEntries)))
		} else {
			row("recovered from", "WAL entries "+rangeText(p.ReplayFrom, p.ReplayTo, p.ReplayEntries)+" (no snapshot)")
		}
		row("replayed events", *s.ReplayedEvents)
		row("wal range", walRangeText(p.WAL.FirstIndex, p.WAL.LastIndex))
		row("wal torn bytes", p.WAL.TornBytes)
		for _, sk := range p.Skipped {
			row("snapshot skipped", sk.File+": "+sk.Reason)
		}
		if p.FormatUpgrade != 0 {
			row("format upgrade", formatUpgradeText(p))
		}
		if p.WriteProblem != "" {
			row("restart would FAIL", p.WriteProblem)
		}
	}
	if m := s.Snapshot; m != nil {
		row("snapshot", m.File)
		row("wal index", m.WALIndex)
		row("created", m.Created)
		row("format", m.Format)
		row("hash seed", m.HashSeed)
		row("seq rule", m.SeqRule)
		row("chunks", m.Chunks)
		row("data checksum", m.Checksum)
		var src []string
		for _, x := range m.Sources {
			src = append(src, fmt.Sprintf("%s=%d", x.Name, x.Seq))
		}
		if len(src) == 0 {
			src = []string{"-"}
		}
		row("sources", strings.Join(src, " "))
	}
	row("entries", s.Entries)
	row("holder blocks", s.HolderBlocks)
	row("worker keys", s.WorkerKeys)
	row("places", s.Places)
	row("bytes", s.Bytes)
	row("bytes per holder-block", s.BytesPerHolderBlock)
	fmt.Fprintln(bw, "\ncounters")
	c := s.Counters
	for _, kv := range []struct {
		k string
		v uint64
	}{{"events_stored", c.EventsStored}, {"events_removed", c.EventsRemoved}, {"events_cleared", c.EventsCleared},
		{"events_worker_removed", c.EventsWorkerRemoved}, {"blocks_stored", c.BlocksStored}, {"blocks_removed", c.BlocksRemoved},
		{"parent_not_found", c.ParentNotFound}, {"invalid_sequence", c.InvalidSequence}, {"invalid_event", c.InvalidEvent},
		{"too_many_workers", c.TooManyWorkers}, {"duplicate_store", c.DuplicateStore}, {"block_not_found", c.BlockNotFound}} {
		fmt.Fprintf(bw, "  %-22s %d\n", kv.k, kv.v)
	}
	fmt.Fprintf(bw, "\n%-24s %s\n", "worker key", "blocks")
	for _, wc := range s.Workers {
		fmt.Fprintf(bw, "  %-22s %d\n", fmt.Sprintf("%d/%d", wc.WorkerID, wc.DPRank), wc.Blocks)
	}
	fmt.Fprintf(bw, "\n%-24s %10s %14s\n", "depth (positions)", "places", "holder blocks")
	for _, d := range s.Depth {
		fmt.Fprintf(bw, "  %-22s %10d %14d\n", fmt.Sprintf("%d-%d", d.From, d.To), d.Places, d.HolderBlocks)
	}
	return bw.Flush()
}

func rangeText(from, to, n uint64) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d (%d)", from, to, n)
}

func walRangeText(first, last uint64) string {
	if first > last {
		return fmt.Sprintf("empty (next index %d)", first)
	}
	return fmt.Sprintf("%d..%d", first, last)
}

// ---- entries ----

// parseWorkerSel parses ID or ID/DP.
func parseWorkerSel(s string) (id uint64, rank uint32, hasRank bool, err error) {
	idS, rankS, has := strings.Cut(s, "/")
	if id, err = strconv.ParseUint(idS, 10, 64); err != nil {
		return 0, 0, false, fmt.Errorf("--worker %q: want ID or ID/DP_RANK", s)
	}
	if has {
		r, err := strconv.ParseUint(rankS, 10, 32)
		if err != nil {
			return 0, 0, false, fmt.Errorf("--worker %q: want ID or ID/DP_RANK", s)
		}
		return id, uint32(r), true, nil
	}
	return id, 0, false, nil
}

func appendPlaceJSON(dst []byte, rec *engine.PlaceRecord) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendUint(dst, uint64(rec.ID), 10)
	dst = append(dst, `,"position":`...)
	dst = strconv.AppendUint(dst, uint64(rec.Position), 10)
	dst = append(dst, `,"tokens_hash":`...)
	dst = strconv.AppendUint(dst, rec.TokensHash, 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, rec.Seq, 10)
	dst = append(dst, `,"parent":`...)
	dst = strconv.AppendUint(dst, uint64(rec.Parent), 10)
	dst = append(dst, `,"holders":[`...)
	for i, h := range rec.Holders {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"worker_id":`...)
		dst = strconv.AppendUint(dst, h.Worker.WorkerID, 10)
		dst = append(dst, `,"dp_rank":`...)
		dst = strconv.AppendUint(dst, uint64(h.Worker.DPRank), 10)
		dst = append(dst, `,"block_hashes":[`...)
		for j, bh := range h.BlockHashes {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, bh, 10)
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, "]}"...)
}

func appendPlaceText(dst []byte, rec *engine.PlaceRecord) []byte {
	dst = fmt.Appendf(dst, "pos=%d tokens_hash=%d seq=%d id=%d parent=%d holders=", rec.Position, rec.TokensHash, rec.Seq, rec.ID, rec.Parent)
	for i, h := range rec.Holders {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = fmt.Appendf(dst, "%d/%d:", h.Worker.WorkerID, h.Worker.DPRank)
		for j, bh := range h.BlockHashes {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, bh, 10)
		}
	}
	return dst
}

func newInspectEntriesCmd() *cobra.Command {
	var (
		workers    []string
		from, to   uint32
		tokensHash uint64
		limit      int
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "entries FILE [--worker ID[/DP]] [--from P] [--to Q] [--tokens-hash H] [--limit N] [--json]",
		Short: "Stream a snapshot's places, filtered",
		Long: `Entries streams the places of snapshot FILE in position order (places of one
position in file order), one line each: position, tokens hash, router seq, the
place's ordinal in the file (id) and its parent's (0: none), and every holder
(worker/dp_rank) with its block hashes. Only the chunks that can hold places in
--from..--to are read, and the file is never loaded whole: memory stays flat
however large the snapshot.

--worker (repeatable) keeps the places held by that worker key, with only its
holders; ID alone selects every DP rank of the worker. --tokens-hash keeps one
local hash. --json prints NDJSON:

  {"id":1,"position":0,"tokens_hash":101,"seq":101,"parent":0,"holders":[{"worker_id":7,"dp_rank":0,"block_hashes":[11]}]}`,
		Example: `  kvidx inspect entries snapshot-00000000000000041234.bolt --worker 7 --from 0 --to 15
  kvidx inspect entries snapshot-00000000000000041234.bolt --tokens-hash 1234567 --json
  kvidx inspect entries snapshot-00000000000000041234.bolt --limit 20`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if from > to {
				return fmt.Errorf("inspect entries: --from %d is after --to %d", from, to)
			}
			if limit < 0 {
				return fmt.Errorf("inspect entries: --limit %d: want 0 (no limit) or a positive count", limit)
			}
			r, err := snapshot.Open(args[0])
			if err != nil {
				return fmt.Errorf("inspect entries: %w", err)
			}
			defer r.Close()
			var sel []engine.WorkerKey
			for _, ws := range workers {
				id, rank, hasRank, err := parseWorkerSel(ws)
				if err != nil {
					return fmt.Errorf("inspect entries: %w", err)
				}
				for _, k := range r.Workers() {
					if k.WorkerID == id && (!hasRank || k.DPRank == rank) {
						sel = append(sel, k)
					}
				}
			}
			if len(workers) > 0 && len(sel) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "kvidx inspect entries: no worker key of %s matches %s\n", args[0], strings.Join(workers, ", "))
				return nil
			}
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			hasTH := cmd.Flags().Changed("tokens-hash")
			var buf []byte
			n := 0
			var werr error
			err = r.Scan(ctx, from, to, sel, func(rec *engine.PlaceRecord) bool {
				if hasTH && rec.TokensHash != tokensHash {
					return true
				}
				if asJSON {
					buf = appendPlaceJSON(buf[:0], rec)
				} else {
					buf = appendPlaceText(buf[:0], rec)
				}
				if _, werr = out.Write(append(buf, '\n')); werr != nil {
					return false
				}
				n++
				return limit <= 0 || n < limit
			})
			if ferr := out.Flush(); werr == nil {
				werr = ferr
			}
			if err != nil {
				return fmt.Errorf("inspect entries: %w", err)
			}
			if werr != nil {
				return fmt.Errorf("inspect entries: writing: %w", werr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&workers, "worker", nil, "keep places held by worker `ID[/DP]` (repeatable)")
	f.Uint32Var(&from, "from", 0, "first position")
	f.Uint32Var(&to, "to", math.MaxUint32, "last position")
	f.Uint64Var(&tokensHash, "tokens-hash", 0, "keep places of this local (tokens) hash")
	f.IntVar(&limit, "limit", 0, "stop after N places (0: no limit)")
	f.BoolVar(&asJSON, "json", false, "print NDJSON")
	return cmd
}

// ---- match ----

func newInspectMatchCmd() *cobra.Command {
	var (
		tokens, hashes string
		blockSize      int
		lora           string
	)
	cmd := &cobra.Command{
		Use:   "match FILE (--tokens 1,2,3 --block-size N [--lora-name X] | --local-hashes H1,H2,...)",
		Short: "Answer a prefix query from a snapshot",
		Long: `Match loads snapshot FILE into an index and answers one prefix query, as the
server would have at the snapshot's WAL index. The answer has the shape of
kvidx replay's results:

  {"scores":[{"worker_id":7,"dp_rank":0,"matched_blocks":2}],"query_blocks":2}

Token queries hash full blocks only, like Dynamo's router (see kvidx replay).`,
		Example: `  kvidx inspect match snapshot-00000000000000041234.bolt --local-hashes 101,102
  kvidx inspect match snapshot-00000000000000041234.bolt --tokens 1,2,3,4,5,6,7,8 --block-size 4 --lora-name my-adapter`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			var local []uint64
			switch {
			case tokens != "" && hashes != "":
				return fmt.Errorf("inspect match: give --tokens or --local-hashes, not both")
			case tokens != "":
				if blockSize <= 0 {
					return fmt.Errorf("inspect match: --tokens needs --block-size N (N > 0)")
				}
				var toks []uint32
				for i, s := range splitList(tokens) {
					v, err := strconv.ParseUint(s, 10, 32)
					if err != nil {
						return fmt.Errorf("inspect match: --tokens: element %d, %q, is not a token id", i+1, s)
					}
					toks = append(toks, uint32(v))
				}
				local = engine.LocalHashes(nil, toks, blockSize, lora)
			case hashes != "":
				// Local hashes are already hashed: a block size or LoRA name
				// would change nothing, and ignoring one hides a mistake.
				for _, name := range []string{"block-size", "lora-name"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("inspect match: --%s applies to --tokens, not to --local-hashes", name)
					}
				}
				for i, s := range splitList(hashes) {
					v, err := strconv.ParseUint(s, 10, 64)
					if err != nil {
						return fmt.Errorf("inspect match: --local-hashes: element %d, %q, is not a 64-bit unsigned integer", i+1, s)
					}
					local = append(local, v)
				}
			default:
				return fmt.Errorf("inspect match: give --tokens (with --block-size) or --local-hashes")
			}
			ix, _, err := snapshot.Load(ctx, args[0])
			if err != nil {
				return fmt.Errorf("inspect match: %w", err)
			}
			scores := []engine.Score{}
			if len(local) > 0 {
				scores = ix.Match(local, nil)
			}
			_, err = cmd.OutOrStdout().Write(append(eventjson.AppendResult(nil, scores, len(local)), '\n'))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&tokens, "tokens", "", "comma-separated token ids")
	f.IntVar(&blockSize, "block-size", 0, "tokens per block (with --tokens)")
	f.StringVar(&lora, "lora-name", "", "LoRA adapter name (with --tokens)")
	f.StringVar(&hashes, "local-hashes", "", "comma-separated local block hashes")
	return cmd
}

// splitList splits a comma-separated list into its trimmed elements, empty
// ones included: a query's hashes and tokens are positional, so an empty
// element (a typo, an unset shell variable) must be an error, not dropped.
func splitList(s string) []string {
	out := strings.Split(s, ",")
	for i, f := range out {
		out[i] = strings.TrimSpace(f)
	}
	return out
}
