package snapshot

// Checking and comparing files, for inspection tools.
//
// [Check] runs every check a file can be put to and reports what it finds
// rather than stopping at the first defect: the meta and its name, the
// checksums, framing, order and counts ([Reader.Verify]), every place's
// holders and parent link ([Reader.Scan]), then the holders against the
// reverse maps of a loaded index ([Load], [engine.Index.Verify]).
//
// [Diff] compares two files position by position, streaming both (each is
// scanned on a goroutine of its own): memory holds a few positions' places,
// never a whole file.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvidx/kvidx/engine"
)

// CheckOptions are Check's options; the zero value is a plain check.
type CheckOptions struct {
	// Strict makes every parent link that does not chain a finding too,
	// "parent link: <warning>", after the others (Warnings still lists
	// the first 20).
	Strict bool
	// Progress, when set, is called on the goroutine that called Check
	// as its three passes over the places go (checksums and counts, each
	// place, the load into an index), with the work done so far and the
	// total, both in places: each pass counts the meta's count of places.
	Progress func(done, total int)
}

// maxWarnings is how many warnings Check lists.
const maxWarnings = 20

// CheckReport is what Check found in one file. A file is sound when
// Findings is empty; warnings are about what a sound file may hold.
type CheckReport struct {
	// Findings are the file's defects, one line each, prefixed by the check
	// that found them ("open: ", "checksums and counts: ", "empty entry: ",
	// ...). Never nil.
	Findings []string `json:"findings"`
	// Warnings are parent links that do not chain: legitimate when the
	// parent's slot was reused after the parent went away (the loader
	// drops such links). The first 20 of them; never nil.
	Warnings []string `json:"warnings"`
	// Places counts the places read.
	Places int `json:"places"`
	// ParentLinks counts the places with a parent.
	ParentLinks int `json:"parent_links"`
	// StaleParentLinks counts the parent links that do not chain, listed
	// in Warnings or not.
	StaleParentLinks int `json:"stale_parent_links"`
}

// Check runs every check of a snapshot file on path and reports what it
// finds: that the meta is sound and, for a snapshot-N.bolt name, agrees
// with the name on the WAL index (a restart sets a file that disagrees
// aside as damaged); the data checksum, every chunk's framing and order,
// and the entry, holder-block, place and chunk counts; that no entry is
// empty and no holder lacks a block hash; that every parent link chains
// (the parent sits one position earlier and the place's router seq is
// engine.NextSeq(parent seq, tokens hash)), else a warning; and, loading
// the file into an index, that every holder agrees with the reverse maps.
//
// Every defect of the file, one it cannot be opened for included, is a
// finding; the error is only for ctx ending before the check does. The
// file is opened read-only: safe on a running server's snapshots.
func Check(ctx context.Context, path string, opts CheckOptions) (*CheckReport, error) {
	rep := &CheckReport{Findings: []string{}, Warnings: []string{}}
	var links []string // with Strict, every stale link as a finding
	warn := func(format string, args ...any) {
		rep.StaleParentLinks++
		if len(rep.Warnings) >= maxWarnings && !opts.Strict {
			return
		}
		w := fmt.Sprintf(format, args...)
		if len(rep.Warnings) < maxWarnings {
			rep.Warnings = append(rep.Warnings, w)
		}
		if opts.Strict {
			links = append(links, "parent link: "+w)
		}
	}
	find := func(what string, err error) {
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.Contains(line, "bad holder count 0") {
				line += " (an empty entry: a place without holders)"
			}
			rep.Findings = append(rep.Findings, what+": "+line)
		}
	}
	err := check(ctx, path, opts.Progress, rep, find, warn)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("checking snapshot %s: %w", path, err)
	}
	rep.Findings = append(rep.Findings, links...)
	return rep, nil
}

// check runs Check's checks, adding to rep through find and warn; it
// returns an error only once ctx has ended.
func check(ctx context.Context, path string, progress func(done, total int), rep *CheckReport, find func(string, error), warn func(string, ...any)) error {
	r, err := Open(path)
	if err != nil {
		find("open", err)
		return nil
	}
	defer r.Close()
	if n, ok := ParseFileName(filepath.Base(path)); ok && n != r.Meta().Index {
		rep.Findings = append(rep.Findings, fmt.Sprintf("name: the file's name says WAL index %d, its meta %d (a restart sets it aside as damaged)", n, r.Meta().Index))
	}
	// Each pass counts the places once in the progress total.
	places := r.Meta().Places
	pass := func(n int) func(done, total int) {
		if progress == nil {
			return nil
		}
		return func(done, _ int) { progress(n*places+min(done, places), 3*places) }
	}
	// Checksums, framing, order and counts.
	verr := r.VerifyWith(ctx, pass(0))
	if verr != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		find("checksums and counts", verr)
	}
	// Places one by one: holders, and router seqs against their parents.
	var (
		curPos, prevPos     uint32
		curStart, prevStart uint32
		curSeqs, prevSeqs   []uint64
		started             bool
	)
	scanned := pass(1)
	serr := r.Scan(ctx, 0, math.MaxUint32, nil, func(rec *engine.PlaceRecord) bool {
		rep.Places++
		if rep.Places&1023 == 0 && scanned != nil {
			scanned(rep.Places, places)
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
		rep.ParentLinks++
		i := int64(rec.Parent) - int64(prevStart)
		switch {
		case len(prevSeqs) == 0 || prevPos+1 != rec.Position || i < 0 || i >= int64(len(prevSeqs)):
			warn("place %d (position %d): parent %d is not at position %d", rec.ID, rec.Position, rec.Parent, int64(rec.Position)-1)
		case engine.NextSeq(prevSeqs[i], rec.TokensHash) != rec.Seq:
			warn("place %d (position %d): seq %d, but its parent %d chains to %d", rec.ID, rec.Position, rec.Seq, rec.Parent, engine.NextSeq(prevSeqs[i], rec.TokensHash))
		}
		return true
	})
	if serr != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		if verr == nil {
			find("places", serr)
		}
	}
	if verr != nil || serr != nil {
		return nil
	}
	// Holders against the reverse data: load into an engine and check it.
	ix, _, err := LoadWith(ctx, path, LoadOptions{Progress: pass(2)})
	if err != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		find("load", err)
		return nil
	}
	if err := ix.Verify(); err != nil {
		find("index", err)
	}
	return nil
}

// DiffOptions are Diff's options; the zero value counts changes without
// listing them.
type DiffOptions struct {
	// List fills DiffReport.Changes with one line per change.
	List bool
}

// DiffReport counts what snapshot B holds that A does not (added) and what
// A holds that B does not (removed): entries (position, tokens hash),
// places (entry plus router seq) and holder-blocks (place, worker key,
// block hash).
type DiffReport struct {
	EntriesAdded        int `json:"entries_added"`
	EntriesRemoved      int `json:"entries_removed"`
	PlacesAdded         int `json:"places_added"`
	PlacesRemoved       int `json:"places_removed"`
	HolderBlocksAdded   int `json:"holder_blocks_added"`
	HolderBlocksRemoved int `json:"holder_blocks_removed"`
	// Changes lists every change when DiffOptions.List is set, in position
	// order; within a position entries, then places, then holder-blocks,
	// removals before additions, each kind sorted:
	//
	//	- entry  pos=3 tokens_hash=...
	//	+ place  pos=3 tokens_hash=... seq=...
	//	- holder pos=3 tokens_hash=... seq=... worker=7/0 block_hash=...
	Changes []string `json:"changes,omitempty"`
}

// Diff compares snapshot A (older) with snapshot B (newer), position by
// position, streaming both files. A file that cannot be opened or read is
// an error (matching ErrCorrupt when the file is damaged), as is ctx ending
// before the comparison does.
func Diff(ctx context.Context, pathA, pathB string, opts DiffOptions) (*DiffReport, error) {
	ra, err := Open(pathA)
	if err != nil {
		return nil, err
	}
	defer ra.Close()
	rb, err := Open(pathB)
	if err != nil {
		return nil, err
	}
	defer rb.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ca, ea := streamPositions(ctx, ra)
	cb, eb := streamPositions(ctx, rb)
	d := &DiffReport{}
	ga, okA := <-ca
	gb, okB := <-cb
	for okA || okB {
		switch {
		case okA && (!okB || ga.pos < gb.pos):
			d.comparePosition(ga.pos, ga.places, nil, opts.List)
			ga, okA = <-ca
		case okB && (!okA || gb.pos < ga.pos):
			d.comparePosition(gb.pos, nil, gb.places, opts.List)
			gb, okB = <-cb
		default:
			d.comparePosition(ga.pos, ga.places, gb.places, opts.List)
			ga, okA = <-ca
			gb, okB = <-cb
		}
	}
	if err := errors.Join(<-ea, <-eb); err != nil {
		return nil, err
	}
	return d, nil
}

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
// gets the scan's result once the groups are all sent, or ctx's error when
// ctx ended before they were.
func streamPositions(ctx context.Context, r *Reader) (<-chan posGroup, <-chan error) {
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
		sent := true
		err := r.Scan(ctx, 0, math.MaxUint32, nil, func(rec *engine.PlaceRecord) bool {
			if g.places == nil || rec.Position != g.pos {
				if sent = send(); !sent {
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
		if err == nil && sent {
			sent = send()
		}
		// A scan stopped for a send that ctx's end cut short returns no
		// error: the groups sent are then not all the file's.
		if err == nil && !sent {
			err = fmt.Errorf("snapshot %s: %w", r.path, context.Cause(ctx))
		}
		errc <- err
	}()
	return ch, errc
}

// comparePosition adds the differences of one position to d (a or b may be
// nil: the position is absent on that side).
func (d *DiffReport) comparePosition(pos uint32, a, b map[placeKey][]holderKey, list bool) {
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
