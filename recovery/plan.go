package recovery

// The read-only plan.
//
// [Plan] finds what [Open] would do with a data directory, changing
// nothing: no lock, no repair, no temporary file removed, no snapshot moved
// aside. It makes Open's choices with Open's functions ([CheckFormat],
// [wal.Inspect], [ChooseSnapshot], [DamageRefusal]), so the two agree by
// construction; kvidx recover --dry-run and kvidx inspect summary DATA_DIR
// print its [RecoveryPlan]. [RecoveryPlan.Replay] applies the entries a
// restart would replay to an index, reading the WAL read-only.
//
// The plan also says what the data makes no difference to but a restart
// meets: a format 1 directory that a restart upgrades (after which a kvidx
// older than format 2 refuses it), and a data directory this process
// cannot write (a read-only mount, a wal/ of another owner), where a
// restart fails at once: at the WAL's lock file, at its last segment, or
// at the snapshots directory (see writeProblem).
//
// On the directory of a running server, a WAL segment or snapshot listed a
// moment ago can be gone when it is read (the server truncated its WAL or
// pruned a snapshot), and a snapshot published after the WAL was read can
// lie beyond the WAL's end as read: the server at work, not a defect of the
// directory. Plan then plans again, up to [PlanAttempts] times.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/smallfile"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// RecoveryPlan is what a restart of a data directory would do, found
// read-only by [Plan]: it mirrors Open's choices, its snapshot the one
// [ChooseSnapshot] picks as a restart's does. kvidx prints it as JSON (kvidx
// recover --dry-run --json, and as "recovery" in kvidx inspect summary
// DATA_DIR --json): its field names are part of that output.
type RecoveryPlan struct {
	// Format is the version the directory's FORMAT file holds (0: none).
	Format int `json:"format"`
	// FormatProblem, when not empty, is why Open refuses the directory's
	// FORMAT file (or its absence next to existing data).
	FormatProblem string `json:"format_problem,omitempty"`
	// FormatUpgrade, when not 0, is the format a restart upgrades the
	// directory to (from Format, an older one that Open still reads) once
	// it recovered: after that a kvidx that reads only Format refuses the
	// directory. 0 when there is nothing to upgrade, or when the plan
	// holds a refusal (a refused Open leaves the directory as it was).
	FormatUpgrade int `json:"format_upgrade,omitempty"`
	// WriteProblem, when not empty, is why this process could not write
	// the data directory where a restart must (wal/, its lock file, the
	// WAL's last segment, snapshots/, the data directory when wal/ or
	// snapshots/ is missing or FORMAT is to be written), naming the first
	// such path: a read-only mount, or files of another owner. A restart
	// by this user would fail at once, whatever the data; a server running
	// as another user may write it. The rest of the plan is what the data
	// makes of a restart.
	WriteProblem string        `json:"write_problem,omitempty"`
	WAL          WALSummary    `json:"wal"`
	SnapshotUsed *PlanSnapshot `json:"snapshot_used"`
	Skipped      []PlanSkipped `json:"snapshots_skipped"`
	// ReplayFrom..ReplayTo are the WAL entries replayed after the snapshot
	// (ReplayEntries 0: none).
	ReplayFrom    uint64 `json:"replay_from"`
	ReplayTo      uint64 `json:"replay_to"`
	ReplayEntries uint64 `json:"replay_entries"`
	// TempFiles are the interrupted snapshot writes Open would delete (base
	// names).
	TempFiles []string `json:"temp_files_to_remove"`
	// Refusal, when not empty, is why Open would refuse to start.
	Refusal string `json:"refusal,omitempty"`
}

// WALSummary is the WAL as [Plan] found it (see [wal.Layout]).
type WALSummary struct {
	FirstIndex  uint64 `json:"first_index"`
	LastIndex   uint64 `json:"last_index"`
	Segments    int    `json:"segments"`
	Bytes       int64  `json:"bytes"`
	TornBytes   int64  `json:"torn_bytes"`
	TornSegment string `json:"torn_segment,omitempty"`
	TornOffset  int64  `json:"torn_offset,omitempty"`
	// Gaps and Damage describe where the log is not whole.
	Gaps   []string `json:"gaps,omitempty"`
	Damage []string `json:"damage,omitempty"`
	// Pending is a front truncation a restart finishes.
	Pending string `json:"pending_truncation,omitempty"`
	// OpenRefusal, when not empty, is why the WAL cannot be opened as it
	// is (see [OpenRefusal]).
	OpenRefusal string `json:"open_refusal,omitempty"`
}

// PlanSnapshot is the snapshot a restart would load.
type PlanSnapshot struct {
	File  string `json:"file"` // base name
	Index uint64 `json:"wal_index"`
	Bytes int64  `json:"bytes"`
	// Meta is its meta, as read when it was loaded or verified.
	Meta snapshot.Meta `json:"-"`
}

// PlanSkipped is a snapshot a restart would do without, and why.
type PlanSkipped struct {
	File   string `json:"file"` // base name
	Index  uint64 `json:"wal_index"`
	Reason string `json:"reason"`
}

// PlanOptions configure [Plan]. The zero value verifies the candidate
// snapshots, loads none and reports no progress.
type PlanOptions struct {
	// Load loads each candidate snapshot as Open does (snapshot.LoadWith)
	// and makes Plan return the index of the one chosen (or a new, empty
	// one when the WAL is replayed from index 1); otherwise candidates are
	// verified whole (snapshot.Reader.VerifyWith) and no index is built.
	Load bool
	// Progress, when set, is called as the check (load or verification) of
	// each candidate snapshot f begins. places is the count of places the
	// snapshot's meta holds when it is known before the check (a
	// verification opens the file first), else 0 (a load reads the meta as
	// it goes). It returns the functions the check calls: step after each
	// chunk, with the places checked so far and the meta's count (as
	// snapshot.LoadOptions.Progress), and end once the check is over;
	// either may be nil.
	Progress func(f snapshot.File, places int) (step func(done, total int), end func())
}

// PlanAttempts bounds how often [Plan] plans again a directory that changed
// while it was read; a caller that replays a plan ([RecoveryPlan.Replay])
// and finds the WAL truncated under it (wal.ErrTruncated) plans again as
// often.
const PlanAttempts = 5

// ErrNoDataDir is in the error of [CheckDataDir] and [Plan] for a data
// directory that does not exist. It matches [fs.ErrNotExist] too
// (errors.Is), as the error of os.Stat that it replaced did.
var ErrNoDataDir error = noDataDirError{}

type noDataDirError struct{}

func (noDataDirError) Error() string { return "does not exist" }

// Is makes errors.Is(ErrNoDataDir, fs.ErrNotExist) hold.
func (noDataDirError) Is(target error) bool { return target == fs.ErrNotExist }

// CheckDataDir checks that dir exists and is a directory, as the offline
// commands that work on an existing data directory need: its errors name
// dir, and wrap [ErrNoDataDir] (which matches [fs.ErrNotExist] as well)
// when there is nothing at dir.
func CheckDataDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data dir %s %w", dir, ErrNoDataDir)
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	return nil
}

// OpenRefusal is what a restart of dataDir would say of err, a failure to
// open its WAL: [DamageRefusal]'s message, with the repair to run, for
// damage inside the log; err's own text otherwise.
func OpenRefusal(ctx context.Context, dataDir string, err error) string {
	if msg := DamageRefusal(ctx, dataDir, err); msg != "" {
		return msg
	}
	return err.Error()
}

// Plan finds, read-only, what [Open] would do with the data directory dir
// (see the options). A refusal is in the plan's Refusal, not an error: the
// error is for a directory that cannot be read (I/O, or dir missing or not
// a directory) and for ctx done. The index is returned with
// [PlanOptions.Load] only, and only when the plan holds no refusal.
func Plan(ctx context.Context, dir string, opts PlanOptions) (p *RecoveryPlan, ix *engine.Index, err error) {
	for attempt := 1; ; attempt++ {
		var raced bool
		p, ix, raced, err = planOnce(ctx, dir, opts)
		if !raced || attempt == PlanAttempts || ctx.Err() != nil {
			return p, ix, err
		}
	}
}

// planOnce is one attempt of Plan; raced reports that the directory changed
// while it was read.
func planOnce(ctx context.Context, dir string, opts PlanOptions) (_ *RecoveryPlan, _ *engine.Index, raced bool, _ error) {
	p, ix, err := planRead(ctx, dir, opts, &raced)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr == nil {
			raced = true
		}
	}
	return p, ix, raced, err
}

func planRead(ctx context.Context, dir string, opts PlanOptions, raced *bool) (*RecoveryPlan, *engine.Index, error) {
	if err := CheckDataDir(dir); err != nil {
		return nil, nil, err
	}
	// Lists are [] in JSON when empty, as every list kvidx prints is.
	p := &RecoveryPlan{Skipped: []PlanSkipped{}, TempFiles: []string{}}
	walDir := filepath.Join(dir, WALDirName)
	var err error
	p.Format, err = CheckFormat(dir)
	if errors.Is(err, ErrFormat) {
		p.FormatProblem = err.Error()
	} else if err != nil {
		return nil, nil, err // it names the data dir
	}
	lay, lerr := wal.Inspect(walDir)
	p.WriteProblem = writeProblem(dir, p.Format, lay)
	w := &p.WAL
	w.FirstIndex, w.LastIndex = lay.FirstIndex, lay.LastIndex
	w.Segments, w.Bytes = len(lay.Segments), lay.Bytes
	w.TornBytes, w.TornSegment, w.TornOffset = lay.TornBytes, lay.TornSegment, lay.TornOffset
	w.Pending = lay.Pending
	for _, g := range lay.Gaps {
		w.Gaps = append(w.Gaps, g.Desc)
	}
	for _, d := range lay.Damage {
		w.Damage = append(w.Damage, d.String())
	}
	if lerr != nil && !errors.Is(lerr, wal.ErrCorrupt) {
		return nil, nil, lerr
	}
	if p.FormatProblem != "" {
		// Open checks FORMAT before it opens the WAL.
		p.Refusal = p.FormatProblem
		return p, nil, nil
	}
	if fi, err := os.Stat(filepath.Join(walDir, wal.LockFileName)); err == nil && !fi.Mode().IsRegular() {
		// A restart opens the lock file first, and could not.
		p.Refusal = fmt.Sprintf("the WAL's lock file %s is %s, not a regular file: the lock cannot be taken",
			filepath.Join(WALDirName, wal.LockFileName), smallfile.Kind(fi.Mode()))
		return p, nil, nil
	}
	if lerr != nil {
		w.OpenRefusal = OpenRefusal(ctx, dir, lerr)
		p.Refusal = "the WAL cannot be opened: " + w.OpenRefusal
		return p, nil, nil
	}
	snapDir := filepath.Join(dir, SnapshotDirName)
	if temps, err := snapshot.TempFiles(snapDir); err == nil {
		for _, t := range temps {
			p.TempFiles = append(p.TempFiles, filepath.Base(t))
		}
	}
	snaps, err := snapshot.List(snapDir)
	if err != nil {
		return nil, nil, err
	}
	var ix *engine.Index
	// With Load, the one chosen is the last one tried.
	try := func(f snapshot.File) (snapshot.Meta, error) {
		ix = nil // a misnamed one's index goes before the next loads
		m, lix, err := checkCandidate(ctx, f, opts)
		if errors.Is(err, fs.ErrNotExist) {
			*raced = true // pruned since it was listed
		}
		ix = lix
		return m, err
	}
	c, err := ChooseSnapshot(ctx, dir, snaps, lay.FirstIndex, lay.LastIndex, lay.Gaps, try)
	if err != nil {
		return nil, nil, err
	}
	for _, sk := range c.Skipped {
		p.Skipped = append(p.Skipped, PlanSkipped{File: filepath.Base(sk.Path), Index: sk.Index, Reason: sk.Reason})
	}
	if c.PastEnd {
		// Published after the WAL was read, or the WAL really lost its end:
		// reading again tells.
		*raced = true
	}
	if c.Refusal != "" {
		p.Refusal = c.Refusal
		return p, nil, nil
	}
	last := lay.LastIndex
	from := uint64(1)
	if c.Found {
		p.SnapshotUsed = &PlanSnapshot{File: filepath.Base(c.Used.Path), Index: c.Used.Index, Bytes: c.Used.Size, Meta: c.Meta}
		from = c.Used.Index + 1
	} else {
		ix = nil
	}
	if from <= last {
		p.ReplayFrom, p.ReplayTo, p.ReplayEntries = from, last, last-from+1
		for _, d := range lay.Damage {
			if d.Index >= from && d.Index <= last {
				// With the repair a restart's refusal names.
				ee := &wal.EntryError{Dir: walDir, Segment: d.Segment, Offset: d.Offset, Entry: d.Index, Err: d.Err()}
				p.Refusal = "replay would fail: " + DamageRefusal(ctx, dir, ee)
				return p, nil, nil
			}
		}
	}
	if p.Format >= minFormatVersion && p.Format < FormatVersion {
		p.FormatUpgrade = FormatVersion // Open's last step, once recovered
	}
	if opts.Load && ix == nil {
		ix = engine.New()
	}
	return p, ix, nil
}

// writeProblem says why this process could not write what a restart of the
// data directory dir, of format version (0: none yet) and with the WAL lay,
// must write, or checks it can, before it serves ("": nothing found), in
// the order a restart meets it: the WAL's lock file (opened read-write,
// created when missing), wal/ (created when missing, with the data
// directory), the FORMAT file a new or older-format directory gets (written
// beside it, in dir), snapshots/ (created when missing; Open checks it, see
// [Open]), and the WAL's last segment, which the WAL opens for writing (to
// cut a torn tail, trim the unused fill, append).
func writeProblem(dir string, version int, lay wal.Layout) string {
	const atLock = "the WAL's lock file is opened for writing first"
	type target struct{ path, why string }
	var targets []target
	add := func(path, why string) {
		if !slices.ContainsFunc(targets, func(t target) bool { return t.path == path }) {
			targets = append(targets, target{path, why})
		}
	}
	walDir := filepath.Join(dir, WALDirName)
	if _, err := os.Stat(walDir); errors.Is(err, fs.ErrNotExist) {
		add(dir, atLock) // Open creates wal/ in it
	} else {
		add(walDir, atLock)
		lock := filepath.Join(walDir, wal.LockFileName)
		if fi, err := os.Stat(lock); err == nil && fi.Mode().IsRegular() {
			add(lock, atLock)
		}
	}
	if version < FormatVersion {
		add(dir, "its FORMAT file is written there")
	}
	snapDir := filepath.Join(dir, SnapshotDirName)
	if _, err := os.Stat(snapDir); errors.Is(err, fs.ErrNotExist) {
		if target, err := os.Readlink(snapDir); err == nil {
			// A start's MkdirAll fails on it ("file exists"), whoever runs it.
			return fmt.Sprintf("%s is a symbolic link to %s, which does not exist: a restart would fail at once (it makes the snapshots directory)", snapDir, target)
		}
		add(dir, "snapshots/ is created there")
	} else {
		add(snapDir, "snapshots are written there, and a restart checks that first")
	}
	if n := len(lay.Segments); n > 0 {
		why := "the WAL opens its last segment for writing, to append to it"
		if lay.TornBytes > 0 {
			why = "the WAL cuts the torn tail of its last segment there"
		}
		add(filepath.Join(walDir, lay.Segments[n-1].Name), why)
	}
	for _, t := range targets {
		if err := notWritable(t.path); err != nil {
			return fmt.Sprintf("%v: a restart by this user would fail at once (%s)", err, t.why)
		}
	}
	return ""
}

// notWritable returns an error naming path when this process may not open
// it for writing, as the open of a restart checks it: with the effective
// user and its capabilities (AT_EACCESS). access(2) checks for the real
// user and, when that is not root, without capabilities: a service running
// as its own user with CAP_DAC_OVERRIDE, whose restart writes a root-owned
// data directory, was told it would fail. Where the kernel has no
// faccessat2 (before Linux 5.8, or a seccomp filter refusing it) it is
// access(2), which also tells a read-only mount, where x/sys's emulation of
// AT_EACCESS would not. It is a prediction, for the plan, which must not
// write; a start checks the snapshots directory by making a file there
// (see Open).
func notWritable(path string) error {
	err := unix.Faccessat2(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		err = unix.Access(path, unix.W_OK)
	}
	if err != nil {
		return fmt.Errorf("%s is not writable by this process (uid %d): %w", path, os.Geteuid(), err)
	}
	return nil
}

// checkCandidate checks the snapshot f for Plan: loads it (returning its
// index) with opts.Load, else verifies it, reporting progress to
// opts.Progress.
func checkCandidate(ctx context.Context, f snapshot.File, opts PlanOptions) (snapshot.Meta, *engine.Index, error) {
	var step func(done, total int)
	if opts.Load {
		if opts.Progress != nil {
			var end func()
			step, end = opts.Progress(f, 0)
			if end != nil {
				defer end()
			}
		}
		ix, m, err := snapshot.LoadWith(ctx, f.Path, snapshot.LoadOptions{Progress: step})
		return m, ix, err
	}
	r, err := snapshot.Open(f.Path)
	if err != nil {
		return snapshot.Meta{}, nil, err
	}
	defer r.Close()
	if opts.Progress != nil {
		var end func()
		step, end = opts.Progress(f, r.Meta().Places)
		if end != nil {
			defer end()
		}
	}
	return r.Meta(), nil, r.VerifyWith(ctx, step)
}

// Replay applies the plan's WAL entries (ReplayFrom..ReplayTo) of the data
// directory dataDir (the one planned: a plan holds no path, and one decoded
// from JSON works as well) to ix, reading the WAL read-only, as a restart
// would replay them, and returns
// how many events it applied and how many of them the index rejected.
// progress, when set, is called after each entry. On a running server's
// directory the WAL's front can be truncated since the plan was made: the
// error then matches wal.ErrTruncated, and a new plan (see [PlanAttempts])
// tells what to replay.
func (p *RecoveryPlan) Replay(dataDir string, ix *engine.Index, progress func()) (events, rejected uint64, err error) {
	if p.ReplayEntries == 0 {
		return 0, 0, nil
	}
	_, err = wal.Scan(filepath.Join(dataDir, WALDirName), p.ReplayFrom, p.ReplayTo, func(e wal.Entry) error {
		for i := range e.Events {
			events++
			if ix.Apply(&e.Events[i]) != nil {
				rejected++
			}
		}
		if progress != nil {
			progress()
		}
		return nil
	})
	return events, rejected, err
}
