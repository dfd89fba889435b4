package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

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
		after  uint64
		yes    bool
		backup string
	)
	cmd := &cobra.Command{
		Use:   "repair DATA_DIR --truncate-after INDEX --yes",
		Short: "Cut a log damaged in the middle after a given entry",
		Long: `Repair cuts the write-ahead log of DATA_DIR (its wal/ directory) after entry
INDEX, removing every later entry, damaged or not. kvidx repairs a torn tail by
itself when it opens a log; it refuses, naming the segment and offset, to cut
damage that valid entries follow, because those entries were acknowledged.
This command is the operator's explicit decision to lose them: pick INDEX just
before the damaged entry the error names.

Every segment file the cut changes or deletes is first copied to --backup
(default DATA_DIR/wal-backup-<time>) and fsynced; nothing is cut otherwise. A
file already in --backup is never overwritten (the repair refuses, naming it),
and --backup may not be DATA_DIR/wal itself. Nothing happens without --yes. The data
directory must not be open in a running kvidx (the command takes its lock).`,
		Example: `  kvidx wal repair ./kvidx-data --truncate-after 41234 --yes`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("truncate-after") {
				return errors.New("wal repair: --truncate-after INDEX is required")
			}
			if !yes {
				return fmt.Errorf("wal repair: this removes every entry after %d from %s; run again with --yes to do it", after, args[0])
			}
			dir, err := walDirOf(args[0])
			if err != nil {
				return fmt.Errorf("wal repair: %w", err)
			}
			if backup == "" {
				backup = filepath.Join(args[0], "wal-backup-"+time.Now().UTC().Format("20060102T150405Z"))
			}
			if err := wal.RepairTruncateAfter(dir, after, backup); err != nil {
				return fmt.Errorf("wal repair: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "cut %s after entry %d; what was cut is kept in %s\n", dir, after, backup)
			return err
		},
	}
	cmd.Flags().Uint64Var(&after, "truncate-after", 0, "keep entries up to and including this WAL index")
	cmd.Flags().BoolVar(&yes, "yes", false, "really cut the log")
	cmd.Flags().StringVar(&backup, "backup", "", "directory for copies of the segments the cut changes (default DATA_DIR/wal-backup-<time>)")
	return cmd
}
