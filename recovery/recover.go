package recovery

// How Open recovers.
//
// [Open] removes the temporary files of interrupted snapshot writes, opens
// the WAL (which cuts a torn tail itself) and checks its segment files fit
// end to end. It then picks the newest snapshot that verifies and that the
// WAL reaches back to (WAL first index <= snapshot index + 1, counted after
// the last gap between segments), loads it and replays every entry after the
// snapshot's index, in order, applying each event exactly as a live append
// does (rejections count in the engine's counters the same way). Source
// positions start from the snapshot's and merge each entry's, last value per
// source winning. With no usable snapshot the whole WAL is replayed, and it
// must then begin at index 1.
//
// Open refuses to start, naming every snapshot and why it was rejected and
// the WAL's first and last index, when no snapshot-plus-WAL combination
// covers the history; when a published snapshot is newer than the WAL's last
// entry (acknowledged entries are missing); or when the WAL is damaged or has
// a gap in the entries to replay. It never starts with silent data loss.
// Long snapshot loads and replays log their progress at most once a second.
//
// tidwall/wal neither checks that its segment files follow each other nor
// survives reading an entry of a missing one (it panics), so Open reads the
// framing of every segment but the last to find gaps, and names them.
// An empty WAL can only continue at the index it was emptied at: a lost WAL
// directory next to its snapshots is refused, not restarted at index 1.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// ErrUnrecoverable: the data directory's snapshots and WAL do not cover the
// acknowledged history; Open refuses to start rather than lose data.
var ErrUnrecoverable = errors.New("history not recoverable")

// recover chooses a snapshot, loads it and replays the WAL after it.
func (s *Store) recover(ctx context.Context) error {
	r := &s.report
	var err error
	if r.FirstIndex, err = s.log.FirstIndex(); err != nil {
		return err
	}
	if r.LastIndex, err = s.log.LastIndex(); err != nil {
		return err
	}
	first, last := r.FirstIndex, r.LastIndex
	gaps, err := wal.FindGaps(ctx, filepath.Join(s.dir, WALDirName))
	if err != nil {
		return err
	}
	all, err := snapshot.List(s.snapDir)
	if err != nil {
		return err
	}
	// Each candidate is loaded; the one chosen is the last one tried.
	var (
		lix  *engine.Index
		took time.Duration
	)
	c, err := ChooseSnapshot(ctx, s.dir, all, first, last, gaps, func(f snapshot.File) (snapshot.Meta, error) {
		lix = nil // a misnamed one's index goes before the next loads
		start := time.Now()
		ix, m, err := snapshot.LoadWith(ctx, f.Path, snapshot.LoadOptions{Progress: s.loadProgress(f.Path, start)})
		lix, took = ix, time.Since(start)
		return m, err
	})
	for _, sk := range c.Skipped {
		s.skip(snapshot.File{Path: sk.Path, Index: sk.Index}, sk.Reason)
	}
	if err != nil {
		return err
	}
	if c.Refusal != "" {
		return s.unrecoverable(c.Refusal, all, gaps)
	}
	ix, damaged := lix, c.Damaged
	lix = nil // a misnamed last candidate's index is not kept through the replay
	from := uint64(1)
	if c.Found {
		used, meta := c.Used, c.Meta
		r.SnapshotLoad = took
		r.SnapshotUsed = SnapshotRef{Path: used.Path, Index: used.Index}
		// Snapshot writes nothing until an entry follows the one loaded.
		s.lastSnap, s.haveSnap = r.SnapshotUsed, true
		s.count(used.Index)
		s.noteSnapshotSize(used.Path, meta.Stats.Entries, meta.Stats.HolderBlocks)
		s.applied = used.Index
		for _, src := range meta.Sources {
			s.positions = mergePosition(s.positions, wal.Position{Source: src.Name, Seq: src.Seq})
		}
		from = used.Index + 1
		s.logger.Info("snapshot loaded", "path", used.Path, "index", used.Index,
			"holder_blocks", meta.Stats.HolderBlocks, "duration", r.SnapshotLoad)
	} else {
		ix = engine.New()
	}
	if s.opts.ReserveHolderBlocks > 0 && s.opts.ReserveWorkerKeys > 0 {
		// A large reservation maps gigabytes: say so before the wait.
		s.logger.Info("reserving index memory", "holder_blocks", s.opts.ReserveHolderBlocks,
			"worker_keys", s.opts.ReserveWorkerKeys)
		start := time.Now()
		if err := ix.Reserve(ctx, s.opts.ReserveHolderBlocks, s.opts.ReserveWorkerKeys); err != nil {
			return err
		}
		s.logger.Info("index reserved", "holder_blocks", s.opts.ReserveHolderBlocks,
			"worker_keys", s.opts.ReserveWorkerKeys, "duration", time.Since(start))
	}
	s.ix = ix
	for _, f := range r.SnapshotsSkipped {
		s.logger.Warn("snapshot skipped", "path", f.Path, "index", f.Index, "reason", f.Reason)
	}
	if err := s.replay(ctx, from, last); err != nil {
		// Moved aside first: the refusal names the repair, and the
		// snapshot it relies on, not one this recovery found damaged.
		var de *wal.DamageError
		var ee *wal.EntryError
		if errors.As(err, &de) || errors.As(err, &ee) {
			if merr := s.moveAside(damaged); merr != nil {
				s.logger.Warn("damaged snapshots not moved aside", "err", merr)
			}
		}
		return fmt.Errorf("data dir %s: replay: %w (%s)", s.dir, DamageErr(ctx, s.dir, err), s.found(all, gaps))
	}
	return s.moveAside(damaged)
}

// DamagedSuffix is appended to the name of a snapshot that recovery found
// damaged and did without: snapshot listings no longer see it, and the file
// stays for an operator to examine or delete.
const DamagedSuffix = ".damaged"

// moveAside renames the damaged snapshots a successful recovery skipped. A
// damaged snapshot left in place would count among the K newest that
// pruning keeps: the next snapshot would then delete the good one recovery
// just used and truncate the WAL past it, and one more fault would leave
// nothing to recover from.
func (s *Store) moveAside(damaged []snapshot.File) error {
	for _, f := range damaged {
		if err := MoveAside(f); err != nil {
			return fmt.Errorf("data dir %s: moving damaged snapshot aside: %w", s.dir, err)
		}
		s.logger.Warn("damaged snapshot moved aside", "path", f.Path+DamagedSuffix, "index", f.Index)
	}
	return nil
}

// MoveAside renames the damaged snapshot f to its name with DamagedSuffix
// and makes the rename durable.
func MoveAside(f snapshot.File) error {
	if err := os.Rename(f.Path, f.Path+DamagedSuffix); err != nil {
		return err
	}
	return syncDir(filepath.Dir(f.Path))
}

// SnapshotDamaged reports whether err, from reading the snapshot at path,
// says the file is damaged, as recovery judges it: one unreadable for
// another reason (permissions, a lock held, another build's format) is not,
// and must not be moved aside, since it may hold the only copy of entries.
// Nor is one whose bytes cannot all be read now: bbolt reports a failed
// read of its pages (EIO, as an "invalid database" or a fault in its memory
// map) as it reports damage, so the file is read through first (found by
// review: a sound snapshot on a device answering EIO was renamed, and the
// repair then cut the entries it alone held).
func SnapshotDamaged(path string, err error) bool {
	return errors.Is(err, snapshot.ErrCorrupt) && !errors.Is(err, snapshot.ErrIncompatible) && readsWhole(path)
}

// readsWhole reports whether every byte of the file at path reads without
// an error, as many as its size says.
func readsWhole(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	n, err := io.Copy(io.Discard, f)
	return err == nil && n == fi.Size()
}

// skip records that recovery did without snapshot f; unless it is then
// moved aside, the Store does not count it among the snapshots it keeps.
func (s *Store) skip(f snapshot.File, reason string) {
	s.report.SnapshotsSkipped = append(s.report.SnapshotsSkipped, SkippedSnapshot{Path: f.Path, Index: f.Index, Reason: reason})
	if s.unusable == nil {
		s.unusable = map[uint64]bool{}
	}
	s.unusable[f.Index] = true
}

func gapsAfter(gaps []Span, index uint64) []string {
	var d []string
	for _, g := range gaps {
		if g.To > index {
			d = append(d, g.Desc)
		}
	}
	return d
}

// NotReached is why the snapshot at WAL index index is not used when the
// WAL, from first, is whole only from contig > index+1 on: the entries
// after it are gone, or, when the WAL still begins at or before them,
// broken by gaps (descs describes each gap after index). Recovery and the
// offline tools that predict it use it alike.
func NotReached(index, first, contig uint64, descs []string) string {
	if first <= index+1 {
		return "the WAL entries after it are not whole: " + strings.Join(descs, "; ")
	}
	return fmt.Sprintf("the WAL does not reach back to it: entries %d..%d are needed", index+1, contig-1)
}

// found describes what recovery found: the WAL's range and gaps, and every
// snapshot with the reason it was skipped.
func (s *Store) found(snaps []snapshot.File, gaps []Span) string {
	var b strings.Builder
	r := &s.report
	if r.FirstIndex > r.LastIndex {
		fmt.Fprintf(&b, "WAL empty, next index %d", r.FirstIndex)
	} else {
		fmt.Fprintf(&b, "WAL entries %d..%d", r.FirstIndex, r.LastIndex)
	}
	for _, g := range gaps {
		fmt.Fprintf(&b, "; WAL %s", g.Desc)
	}
	if len(snaps) == 0 {
		b.WriteString("; no snapshot")
	}
	for _, f := range snaps {
		fmt.Fprintf(&b, "; snapshot %s (index %d)", f.Path, f.Index)
		for _, sk := range r.SnapshotsSkipped {
			if sk.Path == f.Path {
				fmt.Fprintf(&b, " skipped: %s", sk.Reason)
			}
		}
		if f.Path == r.SnapshotUsed.Path {
			b.WriteString(" used")
		}
	}
	return b.String()
}

func (s *Store) unrecoverable(why string, snaps []snapshot.File, gaps []Span) error {
	return fmt.Errorf("data dir %s: refusing to start: %s (found: %s): %w", s.dir, why, s.found(snaps, gaps), ErrUnrecoverable)
}

// replay applies the WAL entries from..last, as live appends do. A reader
// goroutine reads and decodes entries ahead while this one applies them.
func (s *Store) replay(ctx context.Context, from, last uint64) (err error) {
	r := &s.report
	if from > last {
		return nil
	}
	start := time.Now()
	defer func() { r.Replay = time.Since(start) }()
	total := last - from + 1
	s.logger.Info("replaying WAL", "from", from, "to", last, "entries", total)

	type item struct {
		e   wal.Entry
		err error
	}
	ch := make(chan item, 256)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		defer func() {
			if v := recover(); v != nil { // tidwall/wal panics on some damage
				ch <- item{err: fmt.Errorf("reading the WAL after entry %d: panic: %v: %w", from-1, v, wal.ErrCorrupt)}
			}
		}()
		for e, err := range s.log.Entries(from) {
			from = e.Index + 1
			select {
			case ch <- item{e, err}:
			case <-stop:
				return
			}
			if err != nil || e.Index >= last {
				return
			}
		}
	}()
	defer func() {
		close(stop)
		for range ch {
		}
		<-done
	}()

	lastLog, lastDone := start, uint64(0)
	for it := range ch {
		if it.err != nil {
			return it.err
		}
		e := &it.e
		if e.Index != s.applied+1 {
			return fmt.Errorf("WAL entry %d follows entry %d: %w", e.Index, s.applied, wal.ErrCorrupt)
		}
		results, ops := s.applyEntry(e)
		r.ReplayedEntries++
		r.ReplayedEvents += uint64(len(e.Events))
		r.ReplayedBlockOps += uint64(ops)
		for _, re := range results {
			if re != nil {
				r.ReplayRejected++
			}
		}
		if e.Index >= last {
			break
		}
		if r.ReplayedEntries&63 == 0 {
			// A signal (kvidx serve's SIGINT, SIGTERM) ends the replay
			// within 64 entries, not at the next progress line: a
			// second apart, it kept an operator's Ctrl-C waiting.
			if err := ctx.Err(); err != nil {
				return err
			}
			if now := time.Now(); now.Sub(lastLog) >= s.opts.ProgressInterval {
				done := r.ReplayedEntries
				s.logger.Info("replaying WAL", "entry", e.Index, "last", last,
					"percent", fmt.Sprintf("%.1f", 100*float64(done)/float64(total)),
					"entries_per_s", int(float64(done-lastDone)/now.Sub(lastLog).Seconds()))
				lastLog, lastDone = now, done
			}
		}
	}
	if s.applied != last {
		return fmt.Errorf("WAL replay stopped at entry %d, the WAL's last is %d: %w", s.applied, last, wal.ErrCorrupt)
	}
	return nil
}

// loadProgress returns a snapshot load's progress callback, which logs at
// most once every ProgressInterval: a 10M holder-block snapshot takes
// seconds to load, and an operator waiting on a restart sees it advance.
func (s *Store) loadProgress(path string, start time.Time) func(done, total int) {
	last, lastDone := start, 0
	return func(done, total int) {
		now := time.Now()
		if now.Sub(last) < s.opts.ProgressInterval {
			return
		}
		s.logger.Info("loading snapshot", "path", path, "places", done, "of", total,
			"percent", fmt.Sprintf("%.1f", 100*float64(done)/float64(max(total, 1))),
			"places_per_s", int(float64(done-lastDone)/now.Sub(last).Seconds()))
		last, lastDone = now, done
	}
}

// Misnamed opens snapshot f (its meta, not its data) and, when the meta
// says another WAL index than f's name, returns that index and why f is not
// used. A file that cannot be opened returns "": the caller judges it as
// it would otherwise.
func Misnamed(f snapshot.File) (metaIndex uint64, why string) {
	r, err := snapshot.Open(f.Path)
	if err != nil {
		return 0, ""
	}
	defer r.Close()
	if m := r.Meta().Index; m != f.Index {
		return m, MisnamedReason(m, f)
	}
	return f.Index, ""
}

// MisnamedReason is why snapshot f, whose meta says WAL index metaIndex,
// another index than its name, is not used.
func MisnamedReason(metaIndex uint64, f snapshot.File) string {
	return fmt.Sprintf("its meta says WAL index %d, its name %d", metaIndex, f.Index)
}

// Span is a gap in the WAL: entries From..To missing or unreadable, Keep
// the last entry a cut after keeps, Stray the bytes whose removal closes
// it, Broken that the segment (named From) is there and its framing
// breaks, Desc what it is, in words. It is [wal.Gap], as [wal.FindGaps]
// and [wal.Inspect] find it.
type Span = wal.Gap

// NoSnapshotRefusal is why a data directory is refused when no snapshot
// is usable and the WAL, first..last, is whole only from contig > 1 on
// (gaps, in index order, are where it is not), with the way out where one
// exists: the newest snapshot that the WAL reaches back to, skipped only
// because a gap follows it, is used once the WAL is cut before the gap.
// The entries from the gap on are lost either way: no replay reaches them.
// Recovery's refusal and the offline tools that predict it use it alike.
func NoSnapshotRefusal(dataDir string, snaps []snapshot.File, first, last, contig uint64, gaps []Span) string {
	msg := noSnapshotRefusal(dataDir, snaps, first, last, contig, gaps)
	if po := snapshot.PassedOver(filepath.Join(dataDir, SnapshotDirName)); len(po) > 0 {
		// One of them may be the snapshot recovery needs (found by an
		// audit: a snapshot linked from a volume not mounted read as
		// "entries 1..N are gone").
		msg += fmt.Sprintf("; passed over, not read as snapshots: %s (if one is the snapshot recovery needs, make it a readable file under that name)",
			strings.Join(po, "; "))
	}
	return msg
}

func noSnapshotRefusal(dataDir string, snaps []snapshot.File, first, last, contig uint64, gaps []Span) string {
	// A snapshot under a wrong name, skipped as damaged, may be the one
	// recovery needs.
	for _, f := range snaps {
		if m, why := Misnamed(f); why != "" && m+1 >= contig && m <= last {
			return fmt.Sprintf("no usable snapshot, but snapshot %s is misnamed (%s): if it is good, renamed %s it is the snapshot recovery needs",
				filepath.Base(f.Path), why, snapshot.FileName(m))
		}
	}
	if msg := strayRefusal(dataDir, snaps, first, contig, gaps); msg != "" {
		return msg
	}
	for _, f := range snaps { // newest first
		if f.Index+1 < first || f.Index+1 >= contig {
			continue
		}
		for _, g := range gaps {
			if g.To <= f.Index {
				continue
			}
			if g.Keep < f.Index {
				// Not a misnamed copy: the repair verifies the name against
				// the meta, and the snapshot holds only what its meta says.
				if _, why := Misnamed(f); why == "" && g.Broken && g.From <= f.Index+1 && wal.HoldsIndexed(filepath.Join(dataDir, WALDirName), g.From, f.Index+1) {
					// The damage lies among entries the snapshot holds, in
					// a segment that is there: a cut before the entry after
					// it (found by the index its frame carries) drops the
					// damage and keeps every later entry.
					return fmt.Sprintf("no usable snapshot: the WAL after snapshot %s is not whole (entries %d..%d are unreadable: their segment's framing breaks at entry %d, which the snapshot holds); "+
						"if that snapshot is good, kvidx wal repair %s --truncate-before %d --yes (it verifies the snapshot first) drops the entries up to %d and keeps the ones after it, and recovery then uses it",
						filepath.Base(f.Path), g.From, g.To, g.Keep+1, wal.ShellArg(dataDir), f.Index+1, f.Index)
				}
				break // the gap takes entries the snapshot needs next
			}
			return fmt.Sprintf("no usable snapshot: the WAL after snapshot %s is not whole (entries %d..%d are missing or unreadable); "+
				"if that snapshot is good, kvidx wal repair %s --truncate-after %d --yes drops entries %d..%d, which no replay can reach, and recovery then uses it",
				filepath.Base(f.Path), g.From, g.To, wal.ShellArg(dataDir), g.Keep, g.Keep+1, last)
		}
		break
	}
	if first == 1 {
		// The entries before the first gap replay from index 1: cutting
		// the rest, from the first gap on, is the way out when the missing
		// ones cannot be put back.
		if len(gaps) > 0 && gaps[0].Keep >= 1 {
			g := gaps[0]
			// A snapshot past the cut would stop the repair (the log
			// would end before it), and it is of no use after the cut.
			var past []string
			for _, f := range snaps {
				if f.Index > g.Keep {
					past = append(past, filepath.Base(f.Path))
				}
			}
			moveFirst := ""
			if len(past) > 0 {
				moveFirst = fmt.Sprintf("move %s out of %s (newer than the cut: the log would end before it), then ",
					strings.Join(past, ", "), filepath.Join(dataDir, SnapshotDirName))
			}
			return fmt.Sprintf("no usable snapshot, and the WAL is not whole from index 1 (entries %d..%d are missing or unreadable); "+
				"put them back if you can, or %skvidx wal repair %s --truncate-after %d --yes drops entries %d..%d, the ones after the gap lost with them, "+
				"and recovery then replays the rest", g.From, g.To, moveFirst, wal.ShellArg(dataDir), g.Keep, g.Keep+1, last)
		}
		return "no usable snapshot, and the WAL is not whole from index 1"
	}
	if len(gaps) > 0 && gaps[0].From < contig {
		// The log begins after index 1 (truncated behind a snapshot), and
		// no snapshot is followed by whole entries: "entries 1..contig-1
		// are gone" would hide which ones are, in fact, missing.
		g := gaps[0]
		return fmt.Sprintf("no usable snapshot: the WAL holds entries %d..%d (the ones before %d were truncated behind a snapshot), but entries %d..%d are missing or unreadable, "+
			"and no snapshot is followed by whole entries; put the missing entries back if you can (the segment from a backup)", first, last, first, g.From, g.To)
	}
	return fmt.Sprintf("no usable snapshot, and the WAL does not begin at index 1 (entries 1..%d are gone)", contig-1)
}

// strayRefusal is NoSnapshotRefusal's way out when every gap is stray
// bytes after a segment's entries (see wal.StrayBytes) and the WAL, once
// they are removed, is whole from index 1, or from a snapshot that was
// skipped only because of the gaps: a repair that loses nothing. It
// returns "" otherwise.
func strayRefusal(dataDir string, snaps []snapshot.File, first, contig uint64, gaps []Span) string {
	if len(gaps) == 0 {
		return ""
	}
	var (
		bytes int64
		runs  []string
	)
	for _, g := range gaps {
		if g.Stray <= 0 {
			return ""
		}
		bytes += g.Stray
		runs = append(runs, fmt.Sprintf("%d..%d", g.From, g.To))
	}
	then := "recovery then replays the WAL from index 1"
	if first > 1 {
		// A snapshot the WAL reaches back to, but not whole past it: one
		// at contig or later was tried and did not load.
		then = ""
		for _, f := range snaps { // newest first
			if f.Index+1 >= first && f.Index+1 < contig {
				then = fmt.Sprintf("if snapshot %s is good, recovery then uses it", filepath.Base(f.Path))
				break
			}
		}
		if then == "" {
			return ""
		}
	}
	return fmt.Sprintf("no usable snapshot, and the WAL is not whole: entries %s are unreadable only because %d stray byte(s) follow the entries of the segment(s) holding them, "+
		"which hold every entry they should; kvidx wal repair %s --trim-stray --yes removes those bytes (a copy kept), losing nothing, and %s",
		strings.Join(runs, ", "), bytes, wal.ShellArg(dataDir), then)
}

// EndProof returns the newest of snaps (newest first, as snapshot.List
// gives them) that recovery takes for proof that the WAL once reached its
// index: every one but a copy under a wrong name whose meta says an index
// at or before last, which recovery skips as damaged.
func EndProof(snaps []snapshot.File, last uint64) (snapshot.File, bool) {
	for _, f := range snaps {
		if f.Index > last {
			if m, why := Misnamed(f); why != "" && m <= last {
				continue
			}
		}
		return f, true
	}
	return snapshot.File{}, false
}

// WALBehindSnapshot is why a data directory whose WAL ends at last, before
// its newest snapshot snap, is refused, and the operator's way out: the
// snapshot holds every entry up to its index, and the WAL can be made to
// continue after it (entries acknowledged after the snapshot, if any, are
// gone with the WAL's end either way). Recovery's refusal and the offline
// tools that predict it use it alike.
func WALBehindSnapshot(dataDir string, snap snapshot.File, last uint64) string {
	if r, err := snapshot.Open(snap.Path); err != nil && SnapshotDamaged(snap.Path, err) {
		// Its name is all there is to say that the WAL once reached its
		// index, and it cannot give those entries back: the repair that
		// continues after it verifies it first, and refuses (found by an
		// audit: the advice named only that repair, whose refusal named no
		// way out).
		return fmt.Sprintf("snapshot %s is named for WAL index %d but the WAL ends at %d, and it is damaged (%v): "+
			"acknowledged entries after %d may be missing from the WAL, and that snapshot cannot give them back; "+
			"put back the WAL's lost segments or a good copy of the snapshot if you can, or kvidx wal repair %s --truncate-after %d --yes "+
			"sets the snapshot aside (renamed *%s) and accepts the loss",
			filepath.Base(snap.Path), snap.Index, last, err, last, wal.ShellArg(dataDir), last, DamagedSuffix)
	} else if err == nil {
		r.Close()
	}
	if m, why := Misnamed(snap); why != "" {
		// The repair verifies a snapshot's name against its meta: the
		// file must be named for its index first.
		return fmt.Sprintf("snapshot %s is misnamed (%s), and the WAL ends at %d: acknowledged entries %d..%d are missing from the WAL; "+
			"if that snapshot is good it holds them: rename it %s, then kvidx wal repair %s --truncate-before %d --yes (it verifies the snapshot first) makes the WAL continue after it",
			filepath.Base(snap.Path), why, last, last+1, m, snapshot.FileName(m), wal.ShellArg(dataDir), m+1)
	}
	return fmt.Sprintf("snapshot %s is at WAL index %d but the WAL ends at %d: acknowledged entries %d..%d are missing from the WAL; "+
		"if that snapshot is good it holds them, and kvidx wal repair %s --truncate-before %d --yes (it verifies the snapshot first) makes the WAL continue after it",
		filepath.Base(snap.Path), snap.Index, last, last+1, snap.Index, wal.ShellArg(dataDir), snap.Index+1)
}
