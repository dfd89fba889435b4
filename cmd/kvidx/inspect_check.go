package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/snapshot"
)

// ---- verify ----

func newInspectVerifyCmd() *cobra.Command {
	var (
		strict bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a snapshot completely; exit 1 with the findings if it is not sound",
		Long: `Verify checks snapshot FILE completely: the meta and its checksum, that a
snapshot-N.bolt name and the meta agree on the WAL index (a restart sets a file
that disagrees aside as damaged), the data checksum, every chunk's framing and order, the entry, holder-block, place and
chunk counts (as recovery does), that no entry is empty and no holder lacks a
block hash, and, loading the file into an index, that every holder agrees with
the reverse maps (the engine's own Verify). It also checks each parent link:
the parent must sit one position earlier and the place's router seq must be
NextSeq(parent seq, tokens hash). A link that does not chain is legitimate
when the parent's slot was reused after the parent went away (the loader drops
such links), so they are warnings, counted; --strict makes them findings.

The exit status is 0 when the file is sound, 1 with the list of findings.
The file is opened read-only: safe on a running server's snapshots.`,
		Example: `  kvidx inspect verify ./kvidx-data/snapshots/snapshot-00000000000000041234.bolt
  kvidx inspect verify --json snapshot-00000000000000041234.bolt | jq .findings`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			var (
				prog    *bar
				started bool
				shown   int
			)
			rep, err := snapshot.Check(ctx, args[0], snapshot.CheckOptions{Strict: strict, Progress: func(done, total int) {
				if !started {
					prog, started = newBar(cmd.ErrOrStderr(), int64(total), "verifying", false), true
				}
				prog.add(int64(done - shown))
				shown = done
			}})
			prog.done()
			if err != nil {
				return fmt.Errorf("inspect verify: %w", err)
			}
			name := filepath.Base(args[0])
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				bw := bufio.NewWriter(out)
				if len(rep.Findings) == 0 {
					fmt.Fprintf(bw, "%s: ok (%d places, %d parent links, %d stale)\n", name, rep.Places, rep.ParentLinks, rep.StaleParentLinks)
				} else {
					fmt.Fprintf(bw, "%s: %s\n", name, plural(len(rep.Findings), "finding"))
					for _, f := range rep.Findings {
						fmt.Fprintf(bw, "  %s\n", f)
					}
				}
				if !strict && len(rep.Warnings) > 0 {
					fmt.Fprintf(bw, "%s: %d stale parent links (ignored by the loader), e.g.:\n", name, rep.StaleParentLinks)
					for _, w := range rep.Warnings {
						fmt.Fprintf(bw, "  %s\n", w)
					}
				}
				if err := bw.Flush(); err != nil {
					return err
				}
			}
			if len(rep.Findings) > 0 {
				return &exitError{code: 1, err: fmt.Errorf("inspect verify: %s: %s", args[0], plural(len(rep.Findings), "finding"))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&strict, "strict", false, "count parent links that do not chain as findings")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// ---- diff ----

func newInspectDiffCmd() *cobra.Command {
	var list, asJSON bool
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Entries, places and holder-blocks added and removed between two snapshots",
		Long: `Diff compares snapshot A (older) with snapshot B (newer), position by
position, streaming both files: it counts entries (position, tokens hash),
places (entry plus router seq) and holder-blocks (place, worker key, block hash)
present only in B (added) or only in A (removed). --list prints each change:

  + entry  pos=3 tokens_hash=...
  - holder pos=3 tokens_hash=... seq=... worker=7/0 block_hash=...`,
		Example: `  kvidx inspect diff snapshots/snapshot-00000000000000041000.bolt snapshots/snapshot-00000000000000042000.bolt
  kvidx inspect diff A.bolt B.bolt --list | grep '^- holder'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			d, err := snapshot.Diff(ctx, args[0], args[1], snapshot.DiffOptions{List: list})
			if err != nil {
				return fmt.Errorf("inspect diff: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, d)
			}
			return writeDiffText(out, d)
		},
	}
	cmd.Flags().BoolVar(&list, "list", false, "list every change")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeDiffText(w io.Writer, d *snapshot.DiffReport) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%-14s %10s %10s\n", "", "added", "removed")
	fmt.Fprintf(bw, "%-14s %10d %10d\n", "entries", d.EntriesAdded, d.EntriesRemoved)
	fmt.Fprintf(bw, "%-14s %10d %10d\n", "places", d.PlacesAdded, d.PlacesRemoved)
	fmt.Fprintf(bw, "%-14s %10d %10d\n", "holder blocks", d.HolderBlocksAdded, d.HolderBlocksRemoved)
	for _, c := range d.Changes {
		fmt.Fprintln(bw, c)
	}
	return bw.Flush()
}
