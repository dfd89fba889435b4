package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

func newRecoverCmd() *cobra.Command {
	var (
		dataDir string
		dryRun  bool
		asJSON  bool
		keep    int
	)
	cmd := &cobra.Command{
		Use:   "recover --data-dir DIR [--dry-run] [--json]",
		Short: "Check what a restart would recover, or recover and compact a data directory offline",
		Long: `With --dry-run, recover reports what a restart of DIR would do, changing
nothing (no lock, no repair: safe on a running server's directory): the WAL's
range and torn tail (bytes a restart would cut), the snapshot it would load,
the newer snapshots it would skip and why (damaged, or the WAL does not reach
back to them), the WAL entries it would replay, the temporary files of
interrupted snapshot writes it would delete, or why it would refuse to start.
The rules are recovery's: the newest snapshot that verifies and that the WAL
reaches back to (WAL first index <= snapshot index + 1, and no gap after it),
else a full replay from index 1. It also says when a restart upgrades an older
format (after which older kvidx builds refuse the directory), and when this
user cannot write where a restart must (a read-only mount; wal/, its lock
file, the WAL's last segment or snapshots/ of another owner: a restart by this
user fails at once). The
exit status is 1 when a restart would refuse, or fail for that.

Without --dry-run, recover opens DIR as the server does (taking its lock: it
fails if a server runs on it; DIR must be an existing data directory, holding
a FORMAT file or a wal/ directory: recover creates none), recovers the index, writes a fresh snapshot,
keeps the newest --keep snapshots and truncates the WAL up to the oldest kept
one (offline compaction), then closes and prints the recovery report.`,
		Example: `  kvidx recover --data-dir ./kvidx-data --dry-run
  kvidx recover --data-dir ./kvidx-data          # server stopped: recover, snapshot, compact`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON && !dryRun {
				// The offline recovery prints a table; a script asking for
				// JSON must not get one and compact the directory anyway.
				return fmt.Errorf("recover: --json is for the --dry-run report only (the offline recovery prints a table)")
			}
			if keep < 1 {
				return fmt.Errorf("recover: --keep %d: keep at least 1 snapshot (2, the default, leaves a fallback if the newest is damaged)", keep)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			out := cmd.OutOrStdout()
			if dryRun {
				p, _, err := planRecovery(ctx, dataDir, false, cmd.ErrOrStderr())
				if err != nil {
					return fmt.Errorf("recover: %w", err)
				}
				if asJSON {
					err = writeJSON(out, p)
				} else {
					err = writePlanText(out, p)
				}
				if err != nil {
					return err
				}
				if p.Refusal != "" {
					return &exitError{code: 1, err: fmt.Errorf("recover: a restart of %s would refuse to start: %s", dataDir, p.Refusal)}
				}
				if p.WriteProblem != "" {
					return &exitError{code: 1, err: fmt.Errorf("recover: a restart of %s by this user would fail: %s", dataDir, p.WriteProblem)}
				}
				return nil
			}
			// recovery.Open creates a data directory where there is none,
			// as serve wants; an offline recovery of a mistyped or unrelated
			// path must not.
			if err := requireDataDir(dataDir); err != nil {
				return fmt.Errorf("recover: %w", err)
			}
			// Info: recovery's progress (snapshot load and WAL replay, at
			// most once a second) and its report reach the operator.
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			s, err := recovery.Open(ctx, dataDir, recovery.Options{KeepSnapshots: keep, Logger: logger})
			if err != nil {
				if errors.Is(err, wal.ErrLocked) {
					return fmt.Errorf("recover: %w (is a kvidx server running on it? use --dry-run to inspect it live)", err)
				}
				return fmt.Errorf("recover: %w", err)
			}
			rep := s.Report()
			path, index, serr := s.Snapshot(ctx)
			first, last, rerr := s.WALRange()
			st := s.Index().Stats()
			if cerr := s.Close(); serr == nil {
				serr = cerr
			}
			if serr != nil {
				return fmt.Errorf("recover: %w", serr)
			}
			if rerr != nil {
				return fmt.Errorf("recover: %w", rerr)
			}
			bw := bufio.NewWriter(out)
			row := func(k string, v any) { fmt.Fprintf(bw, "%-22s %v\n", k, v) }
			if rep.SnapshotUsed.Path != "" {
				row("snapshot loaded", fmt.Sprintf("%s (WAL index %d)", filepath.Base(rep.SnapshotUsed.Path), rep.SnapshotUsed.Index))
			} else {
				row("snapshot loaded", "none (full WAL replay)")
			}
			for _, sk := range rep.SnapshotsSkipped {
				row("snapshot skipped", fmt.Sprintf("%s: %s", filepath.Base(sk.Path), sk.Reason))
			}
			for _, t := range rep.TempFilesRemoved {
				row("temp file removed", filepath.Base(t))
			}
			row("torn bytes cut", rep.TornBytesDropped)
			row("replayed", fmt.Sprintf("%d entries, %d events (%d rejected)", rep.ReplayedEntries, rep.ReplayedEvents, rep.ReplayRejected))
			row("entries", st.Entries)
			row("holder blocks", st.HolderBlocks)
			row("worker keys", st.WorkerKeys)
			row("snapshot written", fmt.Sprintf("%s (WAL index %d)", filepath.Base(path), index))
			row("wal now", walRangeText(first, last))
			return bw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "the data `DIR`ectory")
	f.BoolVar(&dryRun, "dry-run", false, "report what a restart would do; change nothing")
	f.BoolVar(&asJSON, "json", false, "with --dry-run: print JSON")
	f.IntVar(&keep, "keep", 2, "snapshots to keep, at least 1 (the WAL is truncated only once this many exist)")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// requireDataDir checks that dir is an existing kvidx data directory: a
// directory holding a FORMAT file or a wal/ directory.
func requireDataDir(dir string) error {
	err := recovery.CheckDataDir(dir)
	if errors.Is(err, recovery.ErrNoDataDir) {
		return fmt.Errorf("%w (recover works on an existing data directory)", err)
	}
	if err != nil {
		return err
	}
	for _, name := range []string{recovery.FormatFileName, recovery.WALDirName} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("data dir %s: %w", dir, err)
		}
	}
	return fmt.Errorf("data dir %s holds neither a %s file nor a %s/ directory: not a kvidx data directory (recover does not create one)",
		dir, recovery.FormatFileName, recovery.WALDirName)
}

func writePlanText(w io.Writer, p *recovery.RecoveryPlan) error {
	bw := bufio.NewWriter(w)
	row := func(k string, v any) { fmt.Fprintf(bw, "%-22s %v\n", k, v) }
	switch {
	case p.FormatProblem != "":
		row("format", p.FormatProblem)
	case p.Format == 0:
		row("format", "no FORMAT file (a new data directory)")
	default:
		row("format", p.Format)
	}
	if p.FormatUpgrade != 0 {
		row("format upgrade", formatUpgradeText(p))
	}
	if p.WriteProblem != "" {
		row("not writable", p.WriteProblem)
	}
	row("wal", fmt.Sprintf("%s, %d segments, %d bytes", walRangeText(p.WAL.FirstIndex, p.WAL.LastIndex), p.WAL.Segments, p.WAL.Bytes))
	if p.WAL.TornBytes > 0 {
		row("torn tail", fmt.Sprintf("%d bytes at offset %d of %s would be cut", p.WAL.TornBytes, p.WAL.TornOffset, p.WAL.TornSegment))
	} else {
		row("torn tail", "none")
	}
	if p.WAL.Pending != "" {
		row("pending truncation", p.WAL.Pending+" (a restart finishes it)")
	}
	for _, g := range p.WAL.Gaps {
		row("wal gap", g)
	}
	for _, d := range p.WAL.Damage {
		row("wal damage", d)
	}
	for _, t := range p.TempFiles {
		row("temp file to remove", t)
	}
	for _, sk := range p.Skipped {
		row("snapshot skipped", fmt.Sprintf("%s (WAL index %d): %s", sk.File, sk.Index, sk.Reason))
	}
	// A refusal found while planning the replay (damage in the entries
	// after the snapshot) comes after the snapshot and the range were
	// chosen: they are shown, as the JSON report has them, since a restart
	// would load that snapshot and stop in that range. Earlier refusals
	// leave both unset.
	if p.Refusal == "" || p.SnapshotUsed != nil || p.ReplayEntries > 0 {
		if p.SnapshotUsed != nil {
			row("snapshot to load", fmt.Sprintf("%s (WAL index %d, %d bytes)", p.SnapshotUsed.File, p.SnapshotUsed.Index, p.SnapshotUsed.Bytes))
		} else {
			row("snapshot to load", "none (full WAL replay from index 1)")
		}
		row("entries to replay", rangeText(p.ReplayFrom, p.ReplayTo, p.ReplayEntries))
	}
	switch {
	case p.Refusal != "":
		row("outcome", "REFUSE to start: "+p.Refusal)
	case p.WriteProblem != "":
		row("outcome", "FAIL to start (as this user): a path it writes is not writable (above)")
	default:
		row("outcome", "a restart would recover")
	}
	return bw.Flush()
}

// formatUpgradeText is the plan's FormatUpgrade for the operator: what a
// restart changes, and what older kvidx builds then do.
func formatUpgradeText(p *recovery.RecoveryPlan) string {
	return fmt.Sprintf("a restart upgrades the data directory from format %d to %d, which a kvidx that reads only format %d (built before format %d) then refuses",
		p.Format, p.FormatUpgrade, p.Format, p.FormatUpgrade)
}
