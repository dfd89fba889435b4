package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

func newWALDumpCmd() *cobra.Command {
	var from, to uint64
	cmd := &cobra.Command{
		Use:   "dump DATA_DIR [--from N] [--to M]",
		Short: "Print WAL entries as NDJSON events that kvidx replay reads",
		Long: `Dump prints every event of the WAL entries --from..--to of DATA_DIR/wal (default:
all), in apply order, one NDJSON line each in kvidx replay's event shape, with
the entry's index first:

  {"wal_index":12,"worker_id":7,"event":{"event_id":1,"dp_rank":0,"data":{"stored":{"blocks":[{"block_hash":11,"tokens_hash":101}]}}}}

The replay decoder ignores "wal_index", so a dump pipes straight into
kvidx replay --events -. Dump reads the segment files read-only (no lock, no
repair): safe on a running server's directory. A data directory of a newer
format than this kvidx reads (its FORMAT file) is refused. A torn tail (an entry being
written, or cut off by a crash) is not part of the log and is not printed; an
entry damaged inside the log stops the dump with an error naming the segment
file and byte offset.`,
		Example: `  kvidx wal dump ./kvidx-data --from 41000 | head
  kvidx wal dump ./kvidx-data | kvidx replay --events - --queries queries.ndjson`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("to") && to == 0 {
				return errors.New("wal dump: --to 0: WAL indexes start at 1")
			}
			if to != 0 && from > to {
				return fmt.Errorf("wal dump: --from %d is after --to %d", from, to)
			}
			dir, err := walDirOf(args[0])
			if err != nil {
				return fmt.Errorf("wal dump: %w", err)
			}
			if err := newerFormat(args[0]); err != nil {
				return fmt.Errorf("wal dump: %w", err)
			}
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			lay, err := wal.Inspect(dir)
			if err != nil && !errors.Is(err, wal.ErrCorrupt) {
				// An I/O error stops the walk part way: its layout is
				// partial (no last index), and the range note made from it
				// would tell of a log without entries. The scan would fail
				// the same way, so fail now.
				return fmt.Errorf("wal dump: %w", err)
			}
			total := int64(0)
			if lay.LastIndex >= lay.FirstIndex {
				lo, hi := max(from, lay.FirstIndex), lay.LastIndex
				if to != 0 {
					hi = min(hi, to)
				}
				if hi >= lo {
					total = int64(hi - lo + 1)
				}
			}
			if note := dumpRangeNote(from, to, lay.FirstIndex, lay.LastIndex); note != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "kvidx wal dump: %s\n", note)
			}
			if to != 0 && to < lay.FirstIndex {
				return nil // the note said so
			}
			if from != 0 && from < lay.FirstIndex {
				from = lay.FirstIndex // the note said the earlier ones are gone
			}
			prog := newBar(cmd.ErrOrStderr(), total, "dumping WAL", false)
			var buf []byte
			scanned, err := wal.Scan(dir, from, to, func(e wal.Entry) error {
				for i := range e.Events {
					buf = eventjson.AppendEventWithIndex(buf[:0], e.Index, &e.Events[i])
					if _, err := out.Write(append(buf, '\n')); err != nil {
						return fmt.Errorf("writing: %w", err)
					}
				}
				prog.add(1)
				return nil
			})
			prog.done()
			if ferr := out.Flush(); err == nil && ferr != nil {
				err = fmt.Errorf("writing: %w", ferr)
			}
			if err != nil {
				return fmt.Errorf("wal dump: %w", recovery.DamageErr(cmd.Context(), args[0], err))
			}
			// Damage past the range does not fail a dump (it salvages what
			// lies before it), but the operator must not miss it: each
			// damaged entry once (a walk can describe one twice), and the
			// gaps, a missing tail among them.
			noted := map[uint64]bool{}
			for _, d := range scanned.Damage {
				if to != 0 && d.Index > to && !noted[d.Index] {
					noted[d.Index] = true
					fmt.Fprintf(cmd.ErrOrStderr(), "kvidx wal dump: note: the log is damaged after --to %d: %s\n", to, d)
				}
			}
			for _, g := range scanned.Gaps {
				if to != 0 && g.From > to {
					fmt.Fprintf(cmd.ErrOrStderr(), "kvidx wal dump: note: the log is not whole after --to %d: %s\n", to, g.Desc)
				}
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&from, "from", 0, "first WAL index (default: the log's first)")
	cmd.Flags().Uint64Var(&to, "to", 0, "last WAL index (default: the log's last)")
	return cmd
}

// dumpRangeNote explains, for stderr, the part of --from..--to (0: open)
// that the log first..last does not hold, so that an empty or short dump is
// not read as missing entries: those before the first were truncated after a
// snapshot, those after the last are not written yet.
func dumpRangeNote(from, to, first, last uint64) string {
	have := fmt.Sprintf("the WAL holds entries %d..%d", first, last)
	if last < first {
		have = fmt.Sprintf("the WAL holds no entries (the next is %d)", first)
	}
	switch {
	case to != 0 && to < first:
		return have + "; earlier ones were truncated after a snapshot (kvidx inspect reads snapshots)"
	case from != 0 && from < first:
		return have + fmt.Sprintf("; entries %d..%d were truncated after a snapshot (kvidx inspect reads snapshots): dumping from %d", from, first-1, first)
	case from > last:
		return have + fmt.Sprintf("; nothing at or after %d yet", from)
	}
	return ""
}

// errNoWALDir is walDirOf's error for a directory without wal/ (it then
// returns the path wal/ would have).
var errNoWALDir = errors.New("no WAL directory")

// walDirOf returns DATA_DIR/wal, after checking that dataDir is a
// directory holding a wal/ directory. The read-only walk calls a missing
// log directory an empty log (a new data directory has none yet), so
// without this a mistyped path, a plain file or the wal directory itself
// was reported as an empty log.
func walDirOf(dataDir string) (string, error) {
	if err := recovery.CheckDataDir(dataDir); err != nil {
		return "", err
	}
	dir := filepath.Join(dataDir, recovery.WALDirName)
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return dir, fmt.Errorf("data dir %s has no %s/ directory (not a kvidx data directory? give DATA_DIR, not DATA_DIR/%s): %w", dataDir, recovery.WALDirName, recovery.WALDirName, errNoWALDir)
	}
	if err != nil {
		return "", fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("data dir %s: %s is not a directory", dataDir, dir)
	}
	return dir, nil
}

// newerFormat is recovery.CheckFormat's error when dataDir's FORMAT file
// names a newer format than this kvidx reads (nil otherwise): the wal
// commands refuse such a directory, as a restart does, since this kvidx may
// misread a later kvidx's log (take its entries for damage or a torn tail).
// A directory without FORMAT (wal/ alone) or with a damaged one is read as
// before.
func newerFormat(dataDir string) error {
	if v, err := recovery.CheckFormat(dataDir); v > recovery.FormatVersion {
		return err
	}
	return nil
}

// walStat is `kvidx wal stat`'s report.
type walStat struct {
	FirstIndex       uint64            `json:"first_index"`
	LastIndex        uint64            `json:"last_index"`
	Entries          uint64            `json:"entries"`
	Segments         []wal.SegmentInfo `json:"segments"`
	Bytes            int64             `json:"bytes"`
	FramedBytes      int64             `json:"framed_bytes"`
	DecodedBytes     int64             `json:"decoded_bytes"`
	CompressionRatio float64           `json:"compression_ratio"`
	TornTail         bool              `json:"torn_tail"`
	TornSegment      string            `json:"torn_segment,omitempty"`
	TornOffset       int64             `json:"torn_offset,omitempty"`
	TornBytes        int64             `json:"torn_bytes"`
	UnusedBytes      int64             `json:"unused_bytes"`
	Pending          string            `json:"pending_truncation,omitempty"`
	Ignored          []string          `json:"ignored_segments,omitempty"`
	Gaps             []string          `json:"gaps,omitempty"`
	Damage           []string          `json:"damage,omitempty"`
	OpenRefusal      string            `json:"open_refusal,omitempty"`
}

func newWALStatCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stat DATA_DIR [--json]",
		Short: "Report the WAL's range, segments, size, compression and torn tail",
		Long: `Stat walks every segment file of DATA_DIR/wal read-only (no lock, no repair:
safe on a running server's directory; a data directory of a newer format than
this kvidx reads, by its FORMAT file, is refused), checking each entry's frame (version
and CRC-32C), and reports the first and last index, the number of entries the log could
read (fewer than the range holds when entries are missing or damaged), every
segment file with its whole entries and size, the total bytes, the compression ratio (decoded
batch bytes over framed entry bytes) and the torn-tail status: whether the
last segment ends in a partial or invalid entry that opening the log would cut
off, and how many bytes. On a running server a torn tail can simply be an
entry being written. A running server also preallocates its last segment,
filling it with 0xA5 bytes that its entries overwrite: that fill after the
last entry is reported as unused bytes, not damage (zeros there are a torn tail).

Gaps between segments and damaged entries are listed with the segment file
and byte offset. The exit status is 1 when the log could not be opened as it
is (damage followed by valid entries in the last segment) and also when it
opens but holds damage or gaps in earlier segments, which a replay through
them stops at: 0 means every entry in the range is readable.`,
		Example: `  kvidx wal stat ./kvidx-data
  kvidx wal stat ./kvidx-data --json | jq .torn_bytes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := walDirOf(args[0])
			if err != nil {
				return fmt.Errorf("wal stat: %w", err)
			}
			if err := newerFormat(args[0]); err != nil {
				return fmt.Errorf("wal stat: %w", err)
			}
			lay, err := wal.Inspect(dir)
			if err != nil && !errors.Is(err, wal.ErrCorrupt) {
				// An I/O error, not something Open would refuse: the walk
				// stopped part way, and its layout (an empty range, a
				// refusal the log may not deserve) is not the log's.
				return fmt.Errorf("wal stat: %w", err)
			}
			st := walStat{
				FirstIndex: lay.FirstIndex, LastIndex: lay.LastIndex, Entries: lay.Entries, Segments: lay.Segments, Bytes: lay.Bytes,
				FramedBytes: lay.FramedBytes, DecodedBytes: lay.DecodedBytes,
				TornTail: lay.TornBytes > 0, TornSegment: lay.TornSegment, TornOffset: lay.TornOffset, TornBytes: lay.TornBytes,
				UnusedBytes: lay.UnusedBytes, Pending: lay.Pending, Ignored: lay.Ignored,
			}
			if st.Segments == nil {
				st.Segments = []wal.SegmentInfo{}
			}
			if lay.FramedBytes > 0 {
				st.CompressionRatio = math.Round(1000*float64(lay.DecodedBytes)/float64(lay.FramedBytes)) / 1000
			}
			for _, g := range lay.Gaps {
				st.Gaps = append(st.Gaps, g.Desc)
			}
			for _, d := range lay.Damage {
				st.Damage = append(st.Damage, d.String())
			}
			if err != nil {
				st.OpenRefusal = recovery.OpenRefusal(cmd.Context(), args[0], err)
			}
			out := cmd.OutOrStdout()
			var werr error
			if asJSON {
				werr = writeJSON(out, st)
			} else {
				werr = writeWALStatText(out, &st)
			}
			if werr != nil {
				return werr
			}
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("wal stat: %w", recovery.DamageErr(cmd.Context(), args[0], err))}
			}
			if len(st.Damage)+len(st.Gaps) > 0 {
				// Open reads only the last segment, so it succeeds; a replay
				// through the damage does not, which is what an operator
				// checking the log before a restart needs to know.
				return &exitError{code: 1, err: fmt.Errorf("wal stat: %s: damaged entries or gaps (listed above): the log opens, but a replay that reaches them stops there (kvidx recover --dry-run tells whether a restart does: one that starts from a snapshot past them does not)", dir)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeWALStatText(w io.Writer, st *walStat) error {
	bw := bufio.NewWriter(w)
	row := func(k string, v any) { fmt.Fprintf(bw, "%-20s %v\n", k, v) }
	row("range", walRangeText(st.FirstIndex, st.LastIndex))
	row("entries", st.Entries)
	row("segments", len(st.Segments))
	row("bytes", st.Bytes)
	row("framed bytes", st.FramedBytes)
	row("decoded bytes", st.DecodedBytes)
	row("compression ratio", st.CompressionRatio)
	if st.TornTail {
		row("torn tail", fmt.Sprintf("yes: %d bytes at offset %d of %s (opening the log cuts them)", st.TornBytes, st.TornOffset, st.TornSegment))
	} else {
		row("torn tail", "no")
	}
	if st.UnusedBytes > 0 {
		row("unused bytes", fmt.Sprintf("%d (0xA5 fill the writer preallocated after the last entry)", st.UnusedBytes))
	} else {
		row("unused bytes", 0)
	}
	if st.Pending != "" {
		row("pending truncation", st.Pending)
	}
	for _, n := range st.Ignored {
		row("ignored segment", n)
	}
	for _, g := range st.Gaps {
		row("gap", g)
	}
	for _, d := range st.Damage {
		row("damage", d)
	}
	if st.OpenRefusal != "" {
		row("open would refuse", st.OpenRefusal)
	}
	fmt.Fprintf(bw, "\n%-22s %12s %10s %12s\n", "segment", "first index", "entries", "bytes")
	for _, s := range st.Segments {
		fmt.Fprintf(bw, "%-22s %12d %10d %12d\n", s.Name, s.FirstIndex, s.Entries, s.Bytes)
	}
	return bw.Flush()
}
