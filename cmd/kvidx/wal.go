package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

func newWALCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wal",
		Short: "Read, check and repair a data directory's write-ahead log",
		Long: `The wal commands work on DATA_DIR/wal. dump and stat only read the segment
files (no lock, no repair, no truncation): they are safe on the directory of a
running server. repair changes the log and needs the server stopped.`,
	}
	cmd.AddCommand(newWALDumpCmd(), newWALStatCmd(), newWALRepairCmd())
	return commandGroup(cmd)
}

func newWALRepairCmd() *cobra.Command {
	var (
		after, before uint64
		yes, drop     bool
		trim          bool
		backup        string
	)
	cmd := &cobra.Command{
		Use:   "repair DATA_DIR (--truncate-after INDEX | --truncate-before INDEX | --trim-stray) --yes",
		Short: "Cut a log damaged in the middle, after or before a given entry, or trim stray bytes",
		Long: `Repair cuts the write-ahead log of DATA_DIR (its wal/ directory). kvidx
repairs a torn tail by itself when it opens a log; it refuses, naming the
segment, offset and entry, to cut damage that valid entries follow, because
those entries were acknowledged. This command is the operator's explicit cut:

--truncate-after INDEX removes every entry after INDEX, damaged or not: pick
INDEX just before the damaged entry the error names. The entries removed are
lost. It refuses when a snapshot is newer than INDEX (the log would end before
it, and kvidx would refuse to start): then use --truncate-before. A snapshot
newer than INDEX that does not verify (every chunk and checksum) is renamed
<name>.damaged first, as recovery does, and does not stop the cut. A log whose
newest segment files are missing (wal/TAIL names a segment that is gone, and a
restart refuses) is accepted as it is with INDEX = its last entry, which the
refusal names; so is a log that ends before a damaged snapshot (the cut then
only sets that snapshot aside).

--truncate-before INDEX removes every entry before INDEX, damaged or not, when
a snapshot of DATA_DIR at WAL index INDEX-1 or later holds them: nothing
acknowledged is lost. The repair first verifies such a snapshot (every chunk
and checksum) and refuses without one. Pick INDEX one past the snapshot's index,
which the startup error names when a snapshot holds the damaged entry. INDEX
may lie past the log's end: the log is then emptied, and continues at INDEX.
Entry INDEX is found by following the log's framing; past damage before it (a
damaged length prefix can hide the next entries), by the index its frame
carries, so such damage does not move the cut; if entry INDEX itself is
damaged, the repair refuses. Entries written by kvidx before frames carried
their index are found by counting frames: when damage broke their framing
before INDEX, the entries after the break cannot be numbered, and may be
entries INDEX and later, which the snapshot does not hold, so the repair
refuses; --drop-unlocated drops them with the rest (a copy kept) when their
framing breaks for good.

--trim-stray removes stray bytes that follow the entries of a segment other
than the last, when those entries are every one the segment should hold (the
next segment's name says which entry comes next) and the bytes hold no valid
entry: a restart and kvidx wal stat report such a segment as a gap, since
tidwall/wal cannot read any entry of it, and recovery's refusal names this
repair. It keeps every entry.

Every segment file the cut changes or deletes is first copied to --backup
(default DATA_DIR/wal-backup-<time>) and fsynced; nothing is cut otherwise. A
file already in --backup is never overwritten (the repair refuses, naming it),
and --backup may not be DATA_DIR/wal itself. Nothing happens without --yes. The data
directory must not be open in a running kvidx (the command takes its lock), nor be
of a newer format than this kvidx reads (its FORMAT file; refused).`,
		Example: `  kvidx wal repair ./kvidx-data --truncate-after 41234 --yes
  kvidx wal repair ./kvidx-data --truncate-before 50001 --yes
  kvidx wal repair ./kvidx-data --trim-stray --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			setAfter, setBefore := cmd.Flags().Changed("truncate-after"), cmd.Flags().Changed("truncate-before")
			modes := 0
			for _, set := range []bool{setAfter, setBefore, trim} {
				if set {
					modes++
				}
			}
			switch {
			case modes > 1:
				return errors.New("wal repair: give one of --truncate-after, --truncate-before and --trim-stray")
			case modes == 0:
				return errors.New("wal repair: --truncate-after INDEX, --truncate-before INDEX or --trim-stray is required")
			case !setBefore && cmd.Flags().Changed("drop-unlocated"):
				return errors.New("wal repair: --drop-unlocated applies to --truncate-before only")
			}
			if !yes {
				what := fmt.Sprintf("removes every entry after %d", after)
				switch {
				case setBefore:
					what = fmt.Sprintf("removes every entry before %d", before)
				case trim:
					what = "trims the stray bytes after the entries of its segments"
				}
				return fmt.Errorf("wal repair: this %s from %s; run again with --yes to do it", what, args[0])
			}
			dir, err := walDirOf(args[0])
			// A lost wal/ is repaired by --truncate-before when a snapshot
			// holds everything before INDEX (checked below): recovery
			// advises just that.
			lostWAL := setBefore && errors.Is(err, errNoWALDir)
			if err != nil && !lostWAL {
				return fmt.Errorf("wal repair: %w", err)
			}
			// A directory of a newer format (a later kvidx's, whose log
			// this one may misread as damage) is not cut: a restart
			// refuses it too. A log without FORMAT (wal/ alone) is
			// repaired as before.
			if err := newerFormat(args[0]); err != nil {
				return fmt.Errorf("wal repair: %w; nothing was changed", err)
			}
			if backup == "" {
				backup = filepath.Join(args[0], "wal-backup-"+time.Now().UTC().Format("20060102T150405Z"))
			}
			out := cmd.OutOrStdout()
			if trim {
				trimmed, err := wal.RepairTrimStray(dir, backup)
				if err != nil {
					return fmt.Errorf("wal repair: %w", err)
				}
				for _, t := range trimmed {
					if _, err := fmt.Fprintf(out, "trimmed %d stray byte(s) off segment %s after its %d entries, all kept\n", t.Bytes, t.Segment, t.Entries); err != nil {
						return err
					}
				}
				_, err = fmt.Fprintf(out, "the segments as they were are kept in %s\n", backup)
				return err
			}
			if setAfter {
				// A cut before the log's first entry is refused by the repair
				// itself ("before the first segment"): no snapshot is judged
				// for it (the one the log begins after would be called
				// useless, and moving it aside loses the directory).
				if lay, _ := wal.Inspect(dir); lay.FirstIndex > 1 && after+1 < lay.FirstIndex {
					return fmt.Errorf("wal repair: %s: entry %d is before the log's first entry %d (the ones before it were truncated behind a snapshot): there is nothing to cut after it; nothing was changed",
						dir, after, lay.FirstIndex)
				}
				// A snapshot past the cut would stop the next start: the WAL
				// would end before it.
				snaps, err := snapshot.List(filepath.Join(args[0], recovery.SnapshotDirName))
				if err != nil {
					return fmt.Errorf("wal repair: %w", err)
				}
				// One that does not verify is useless to recovery, which
				// would move it aside too: it does not stop the cut.
				listed := len(snaps)
				snaps, err = recovery.MoveAsideDamaged(cmd.Context(), dir, snaps, after, func(f snapshot.File, damage error) {
					fmt.Fprintf(out, "moved snapshot %s aside (%s%s): it is damaged (%v)\n", filepath.Base(f.Path), filepath.Base(f.Path), recovery.DamagedSuffix, damage)
				})
				if err != nil {
					return fmt.Errorf("wal repair: %w", err)
				}
				movedAside := len(snaps) < listed
				if f, ok := recovery.EndProof(snaps, after); ok && f.Index > after {
					at, rename := f.Index, ""
					if m, why := recovery.Misnamed(f); why != "" {
						at, rename = m, fmt.Sprintf(" (misnamed: %s)", why)
					}
					msg := fmt.Sprintf("wal repair: snapshot %s%s is at WAL index %d, after entry %d: cut there, the log would end before it and kvidx would refuse to start; ",
						filepath.Base(f.Path), rename, at, after)
					switch {
					case !wal.Locatable(dir, at+1):
						// Entry at+1 is missing or unreadable: the snapshot
						// cannot be continued, and --truncate-before would
						// fail to find it.
						msg += fmt.Sprintf("entry %d after it cannot be read, so the snapshot is of no use to recovery: move it out of %s first", at+1, filepath.Dir(f.Path))
					case rename != "":
						msg += fmt.Sprintf("rename it %s and use --truncate-before %d to drop the entries that snapshot holds instead, or move the snapshot out of %s first",
							snapshot.FileName(at), at+1, filepath.Dir(f.Path))
					default:
						msg += fmt.Sprintf("use --truncate-before %d to drop the entries that snapshot holds instead, or move the snapshot out of %s first", at+1, filepath.Dir(f.Path))
					}
					return errors.New(msg)
				}
				var lost *wal.MissingTailError
				errors.As(wal.CheckTail(dir), &lost)
				if err := wal.RepairTruncateAfter(dir, after, backup); err != nil {
					if movedAside && errors.Is(err, wal.ErrNothingToCut) {
						// The damaged snapshots past the log's end may have
						// been all that stopped a restart: the loss they
						// named is accepted, as the restart's refusal said
						// it would be. With INDEX past the log's end, a
						// good snapshot between the two still stops it.
						lay, _ := wal.Inspect(dir)
						if f, ok := recovery.EndProof(snaps, lay.LastIndex); ok && f.Index > lay.LastIndex {
							return fmt.Errorf("wal repair: %s: the log ends at entry %d, so nothing was cut (the damaged snapshots past it are set aside), but a restart would still refuse: %s",
								dir, lay.LastIndex, recovery.WALBehindSnapshot(args[0], f, lay.LastIndex))
						}
						_, err = fmt.Fprintf(out, "%s: the log already ends at entry %d, so nothing was cut; the damaged snapshots past it are set aside, and the loss of the entries they were named for is accepted\n", dir, lay.LastIndex)
						return err
					}
					return fmt.Errorf("wal repair: %w", err)
				}
				if lost != nil && after == lost.LastEntry {
					_, err = fmt.Fprintf(out, "%s: the loss of the missing segments (entries from %d on) is accepted: the log ends at entry %d; nothing else was cut\n", dir, after+1, after)
					return err
				}
				_, err = fmt.Fprintf(out, "cut %s after entry %d; what was cut is kept in %s\n", dir, after, backup)
				return err
			}
			if before == 0 {
				return errors.New("wal repair: --truncate-before 0: WAL indexes start at 1")
			}
			snap, err := recovery.CoveringSnapshot(cmd.Context(), args[0], before)
			if err != nil {
				return fmt.Errorf("wal repair: %w", err)
			}
			if lostWAL {
				// The snapshot makes DATA_DIR a kvidx data directory: a new,
				// empty log continues after it.
				if err := os.Mkdir(dir, 0o750); err != nil {
					return fmt.Errorf("wal repair: %w", err)
				}
			}
			unlocated, err := wal.RepairTruncateBefore(dir, before, backup, drop)
			if errors.Is(err, wal.ErrUnlocated) {
				return fmt.Errorf("wal repair: %w; to drop them with the rest (a copy is kept in --backup), run again with --drop-unlocated", err)
			}
			if err != nil {
				return fmt.Errorf("wal repair: %w", err)
			}
			if unlocated > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "kvidx wal repair: the last segment's framing broke %d bytes before its end: the entries there could not be located and were removed with the rest (kept in %s)\n", unlocated, backup)
			}
			_, err = fmt.Fprintf(out, "cut %s before entry %d (%s holds every entry up to %d); what was cut is kept in %s\n",
				dir, before, filepath.Base(snap.Path), snap.Index, backup)
			return err
		},
	}
	cmd.Flags().Uint64Var(&after, "truncate-after", 0, "keep entries up to and including this WAL index")
	cmd.Flags().Uint64Var(&before, "truncate-before", 0, "keep entries from this WAL index on (a snapshot must hold the ones before)")
	cmd.Flags().BoolVar(&yes, "yes", false, "really cut the log")
	cmd.Flags().BoolVar(&trim, "trim-stray", false, "remove stray bytes after the entries of segments that hold every entry they should (loses nothing)")
	cmd.Flags().BoolVar(&drop, "drop-unlocated", false, "with --truncate-before: also drop the entries after a framing break before INDEX, whose indexes cannot be located")
	cmd.Flags().StringVar(&backup, "backup", "", "directory for copies of the segments the cut changes (default DATA_DIR/wal-backup-<time>)")
	return cmd
}
