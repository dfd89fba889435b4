package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/snapshot"
)

// ---- verify ----

// verifyReport is what `inspect verify` found in one file.
type verifyReport struct {
	Findings    []string `json:"findings"`
	Warnings    []string `json:"warnings"`
	Places      int      `json:"places"`
	Links       int      `json:"parent_links"`
	StaleLinks  int      `json:"stale_parent_links"`
	maxWarnings int
}

func (v *verifyReport) warn(format string, args ...any) {
	v.StaleLinks++
	if len(v.Warnings) < v.maxWarnings {
		v.Warnings = append(v.Warnings, fmt.Sprintf(format, args...))
	}
}

// verifySnapshot runs every check of `inspect verify` on path.
func verifySnapshot(ctx context.Context, path string, prog func(int)) *verifyReport {
	rep := &verifyReport{Findings: []string{}, Warnings: []string{}, maxWarnings: 20}
	find := func(what string, err error) {
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.Contains(line, "bad holder count 0") {
				line += " (an empty entry: a place without holders)"
			}
			rep.Findings = append(rep.Findings, what+": "+line)
		}
	}
	r, err := snapshot.Open(path)
	if err != nil {
		find("open", err)
		return rep
	}
	defer r.Close()
	// A snapshot's name carries its WAL index too, and a restart sets a
	// file whose name and meta disagree aside as damaged.
	if n, ok := snapshot.ParseFileName(filepath.Base(path)); ok && n != r.Meta().Index {
		rep.Findings = append(rep.Findings, fmt.Sprintf("name: the file's name says WAL index %d, its meta %d (a restart sets it aside as damaged)", n, r.Meta().Index))
	}
	// Checksums, framing, order and counts.
	verr := r.Verify(ctx)
	if verr != nil {
		find("checksums and counts", verr)
	}
	// Places one by one: holders, and router seqs against their parents.
	var (
		curPos, prevPos     uint32
		curStart, prevStart uint32
		curSeqs, prevSeqs   []uint64
		started             bool
	)
	serr := r.Scan(ctx, 0, math.MaxUint32, nil, func(rec *engine.PlaceRecord) bool {
		rep.Places++
		if rep.Places&1023 == 0 && prog != nil {
			prog(1024)
		}
		if !started || rec.Position != curPos {
			if started && rec.Position == curPos+1 {
				prevPos, prevStart, prevSeqs = curPos, curStart, append(prevSeqs[:0], curSeqs...)
			} else {
				prevSeqs = prevSeqs[:0]
			}
			curPos, curStart, curSeqs, started = rec.Position, rec.ID, curSeqs[:0], true
		}
		curSeqs = append(curSeqs, rec.Seq)
		if len(rec.Holders) == 0 {
			rep.Findings = append(rep.Findings, fmt.Sprintf("empty entry: place %d (position %d, tokens hash %d) has no holder", rec.ID, rec.Position, rec.TokensHash))
		}
		for _, h := range rec.Holders {
			if len(h.BlockHashes) == 0 {
				rep.Findings = append(rep.Findings, fmt.Sprintf("place %d (position %d): holder %v without block hash", rec.ID, rec.Position, h.Worker))
			}
		}
		if rec.Parent == 0 {
			return true
		}
		rep.Links++
		i := int64(rec.Parent) - int64(prevStart)
		switch {
		case len(prevSeqs) == 0 || prevPos+1 != rec.Position || i < 0 || i >= int64(len(prevSeqs)):
			rep.warn("place %d (position %d): parent %d is not at position %d", rec.ID, rec.Position, rec.Parent, int64(rec.Position)-1)
		case engine.NextSeq(prevSeqs[i], rec.TokensHash) != rec.Seq:
			rep.warn("place %d (position %d): seq %d, but its parent %d chains to %d", rec.ID, rec.Position, rec.Seq, rec.Parent, engine.NextSeq(prevSeqs[i], rec.TokensHash))
		}
		return true
	})
	if serr != nil && verr == nil {
		find("places", serr)
	}
	if verr != nil || serr != nil {
		return rep
	}
	// Holders against the reverse data: load into an engine and check it.
	ix, _, err := snapshot.Load(ctx, path)
	if err != nil {
		find("load", err)
		return rep
	}
	if err := ix.Verify(); err != nil {
		find("index", err)
	}
	return rep
}

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
			var prog *bar
			if r, err := snapshot.Open(args[0]); err == nil {
				prog = newBar(cmd.ErrOrStderr(), int64(r.Meta().Places), "verifying", false)
				r.Close()
			}
			rep := verifySnapshot(ctx, args[0], func(n int) { prog.add(int64(n)) })
			prog.done()
			if strict {
				for _, w := range rep.Warnings {
					rep.Findings = append(rep.Findings, "parent link: "+w)
				}
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
					fmt.Fprintf(bw, "%s: ok (%d places, %d parent links, %d stale)\n", name, rep.Places, rep.Links, rep.StaleLinks)
				} else {
					fmt.Fprintf(bw, "%s: %s\n", name, plural(len(rep.Findings), "finding"))
					for _, f := range rep.Findings {
						fmt.Fprintf(bw, "  %s\n", f)
					}
				}
				if !strict && len(rep.Warnings) > 0 {
					fmt.Fprintf(bw, "%s: %d stale parent links (ignored by the loader), e.g.:\n", name, rep.StaleLinks)
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

type placeKey struct{ th, seq uint64 }

type holderKey struct {
	w  engine.WorkerKey
	bh uint64
}

// posGroup is every place of one position.
type posGroup struct {
	pos    uint32
	places map[placeKey][]holderKey
}

// streamPositions scans a snapshot and sends its places grouped by
// position, in position order, on the returned channel; the error channel
// gets the scan's result once the groups are all sent.
func streamPositions(ctx context.Context, r *snapshot.Reader) (<-chan posGroup, <-chan error) {
	ch := make(chan posGroup, 4)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		var g posGroup
		send := func() bool {
			if g.places == nil {
				return true
			}
			select {
			case ch <- g:
				return true
			case <-ctx.Done():
				return false
			}
		}
		err := r.Scan(ctx, 0, math.MaxUint32, nil, func(rec *engine.PlaceRecord) bool {
			if g.places == nil || rec.Position != g.pos {
				if !send() {
					return false
				}
				g = posGroup{pos: rec.Position, places: map[placeKey][]holderKey{}}
			}
			k := placeKey{rec.TokensHash, rec.Seq}
			hs := g.places[k]
			for _, h := range rec.Holders {
				for _, bh := range h.BlockHashes {
					hs = append(hs, holderKey{h.Worker, bh})
				}
			}
			g.places[k] = hs
			return true
		})
		if err == nil {
			send()
		}
		errc <- err
	}()
	return ch, errc
}

type diffReport struct {
	EntriesAdded        int      `json:"entries_added"`
	EntriesRemoved      int      `json:"entries_removed"`
	PlacesAdded         int      `json:"places_added"`
	PlacesRemoved       int      `json:"places_removed"`
	HolderBlocksAdded   int      `json:"holder_blocks_added"`
	HolderBlocksRemoved int      `json:"holder_blocks_removed"`
	Changes             []string `json:"changes,omitempty"`
}

// comparePosition adds the differences of one position to d (a or b may be
// nil: the position is absent on that side).
func (d *diffReport) comparePosition(pos uint32, a, b map[placeKey][]holderKey, list bool) {
	var changes []string
	note := func(format string, args ...any) {
		if list {
			changes = append(changes, fmt.Sprintf(format, args...))
		}
	}
	ths := func(m map[placeKey][]holderKey) map[uint64]bool {
		s := map[uint64]bool{}
		for k := range m {
			s[k.th] = true
		}
		return s
	}
	holderSet := func(hs []holderKey) map[holderKey]bool {
		s := make(map[holderKey]bool, len(hs))
		for _, h := range hs {
			s[h] = true
		}
		return s
	}
	// oneWay counts (and lists, with sign) what from has and to lacks:
	// called both ways, it gives removals and additions.
	oneWay := func(from, to map[placeKey][]holderKey, sign string, entries, places, holderBlocks *int) {
		tt := ths(to)
		for th := range ths(from) {
			if !tt[th] {
				*entries++
				note("%s entry  pos=%d tokens_hash=%d", sign, pos, th)
			}
		}
		for k, hs := range from {
			other, ok := to[k]
			if !ok {
				*places++
				note("%s place  pos=%d tokens_hash=%d seq=%d", sign, pos, k.th, k.seq)
			}
			set := holderSet(other)
			for _, h := range hs {
				if !set[h] {
					*holderBlocks++
					note("%s holder pos=%d tokens_hash=%d seq=%d worker=%v block_hash=%d", sign, pos, k.th, k.seq, h.w, h.bh)
				}
			}
		}
	}
	oneWay(a, b, "-", &d.EntriesRemoved, &d.PlacesRemoved, &d.HolderBlocksRemoved)
	oneWay(b, a, "+", &d.EntriesAdded, &d.PlacesAdded, &d.HolderBlocksAdded)
	// Places within a position come in no particular order: sort the lines
	// (entries, then places, then holders; removals first).
	rank := func(s string) int {
		r := 0
		switch {
		case strings.Contains(s[:8], "place"):
			r = 2
		case strings.Contains(s[:8], "holder"):
			r = 4
		}
		if s[0] == '+' {
			r++
		}
		return r
	}
	slices.SortFunc(changes, func(x, y string) int {
		if c := cmp.Compare(rank(x), rank(y)); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	d.Changes = append(d.Changes, changes...)
}

func diffSnapshots(ctx context.Context, pathA, pathB string, list bool) (*diffReport, error) {
	ra, err := snapshot.Open(pathA)
	if err != nil {
		return nil, err
	}
	defer ra.Close()
	rb, err := snapshot.Open(pathB)
	if err != nil {
		return nil, err
	}
	defer rb.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ca, ea := streamPositions(ctx, ra)
	cb, eb := streamPositions(ctx, rb)
	d := &diffReport{}
	ga, okA := <-ca
	gb, okB := <-cb
	for okA || okB {
		switch {
		case okA && (!okB || ga.pos < gb.pos):
			d.comparePosition(ga.pos, ga.places, nil, list)
			ga, okA = <-ca
		case okB && (!okA || gb.pos < ga.pos):
			d.comparePosition(gb.pos, nil, gb.places, list)
			gb, okB = <-cb
		default:
			d.comparePosition(ga.pos, ga.places, gb.places, list)
			ga, okA = <-ca
			gb, okB = <-cb
		}
	}
	if err := errors.Join(<-ea, <-eb); err != nil {
		return nil, err
	}
	return d, nil
}

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
			d, err := diffSnapshots(ctx, args[0], args[1], list)
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

func writeDiffText(w io.Writer, d *diffReport) error {
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
