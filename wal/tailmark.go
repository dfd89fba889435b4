package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvidx/kvidx/internal/smallfile"
)

// The log's end is otherwise recorded nowhere: with its last segment files
// deleted (by hand, or a restore that missed them), a log reads as a
// shorter one, and the acknowledged entries they held would be lost
// without a word. So the directory keeps a small file, TAIL, naming the
// first index of the newest segment the writer has put entries in. It is
// rewritten at each segment rollover, before the directory fsync that makes
// the new segment durable, so it is durable before any entry of the new
// segment is acknowledged; a segment named at or after it must exist.
//
// TAIL is a check, not a source of truth: a missing or unreadable file
// (a directory of an older kvidx, or a power loss that kept the rename but
// not the bytes) checks nothing. TruncateFront may rename the tail segment
// to a later first index, which the check accepts; the operator's cut,
// [RepairTruncateAfter], rewrites it.

// TailMarkName is the file in the WAL directory that names the newest
// segment written to.
const TailMarkName = "TAIL"

// writeTailMark records first as the first index of the newest segment.
// The caller fsyncs the directory. The file's own data is not fsynced: if a
// power loss loses it, the check is skipped, never failed (readTailMark).
func writeTailMark(dir string, first uint64) error {
	if err := smallfile.Write(filepath.Join(dir, TailMarkName), []byte(strconv.FormatUint(first, 10)+"\n"), false); err != nil {
		return fmt.Errorf("wal %s: write %s: %w", dir, TailMarkName, err)
	}
	return nil
}

// maxTailMarkBytes bounds the read of TAIL, which holds one index.
const maxTailMarkBytes = 64

// readTailMark returns the first index TAIL records, 0 when there is no
// such file or it does not hold one.
func readTailMark(dir string) (uint64, error) {
	p := filepath.Join(dir, TailMarkName)
	if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() {
		// A named pipe would block the read for good.
		return 0, fmt.Errorf("wal %s: %s is %s, not a file: move it out of %s (a missing %s is written again at the next segment rollover)",
			dir, p, smallfile.Kind(fi.Mode()), dir, TailMarkName)
	}
	b, err := smallfile.Read(p, maxTailMarkBytes)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, smallfile.ErrTooLarge) {
		// One grown large holds no index either.
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("wal %s: read %s: %w", dir, TailMarkName, err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, nil
	}
	return n, nil
}

// MissingTailError is the refusal of a log whose newest segment files are
// gone: TAIL names segment Mark, but the segments found end with one that
// starts at LastSegment (0: none found), their last entry being LastEntry.
// It matches [ErrCorrupt]. Segment Mark may have held no entry yet (a
// rollover makes the next segment as soon as one fills), so the message
// says what may be lost, not what is. Kept names the temporary files of
// interrupted truncations found in Dir whose segment is gone (see
// isTruncationTemp and truncationSourceExists): a power loss
// during a front truncation cut in the last segment leaves the log in this
// state, the kept file holding the missing entries.
type MissingTailError struct {
	Dir         string
	Mark        uint64
	LastSegment uint64
	LastEntry   uint64
	Kept        []string
}

func (e *MissingTailError) Error() string {
	return fmt.Sprintf("%s: %v", e.Refusal("DATA_DIR"), ErrCorrupt)
}

// Where is the message's account of the loss alone, without the way out.
func (e *MissingTailError) Where() string {
	return e.loss() + e.keptHint()
}

func (e *MissingTailError) loss() string {
	if e.LastSegment == 0 {
		return fmt.Sprintf("wal %s: no segment file is left, but the log had written segment %020d (%s names it as the newest): "+
			"the entries the missing segments held are gone, acknowledged ones among them (deleted by hand, or left out of a copy?)",
			e.Dir, e.Mark, TailMarkName)
	}
	return fmt.Sprintf("wal %s: segment %020d is missing: the log had written it (%s names it as the newest segment), "+
		"but the segment files found end with entry %d, so the entries after it that the missing segments held are gone, "+
		"acknowledged ones among them (deleted by hand, or left out of a copy?)", e.Dir, e.Mark, TailMarkName, e.LastEntry)
}

// keptHint points at the kept truncation files, before any repair is tried.
func (e *MissingTailError) keptHint() string {
	if len(e.Kept) == 0 {
		return ""
	}
	renamed := make([]string, len(e.Kept))
	for i, name := range e.Kept {
		renamed[i] = strings.TrimSuffix(name, ".TEMP")
	}
	return fmt.Sprintf("; but %s holds %s, the temporary file of a truncation a crash interrupted, which may hold them: "+
		"before any repair, rename it %s and start again (the start finishes that truncation)",
		e.Dir, strings.Join(e.Kept, " and "), strings.Join(renamed, " and "))
}

// PutBack is the way out that loses nothing.
const PutBack = "put the missing segment files back, and nothing is lost"

// Refusal is the message with its ways out, naming dataDir.
func (e *MissingTailError) Refusal(dataDir string) string {
	return e.Where() + fmt.Sprintf("; %s; or, to go on without those entries, stop kvidx and run "+
		"kvidx wal repair %s --truncate-after %d --yes", PutBack, ShellArg(dataDir), e.LastEntry)
}

func (e *MissingTailError) Unwrap() error { return ErrCorrupt }

// checkTail returns a [MissingTailError] when mark names a segment after the
// last of segs, whose last entry is lastEntry.
func checkTail(dir string, mark uint64, segs []segFile, lastEntry uint64) error {
	if mark == 0 {
		return nil
	}
	var last uint64
	if len(segs) > 0 {
		last = segs[len(segs)-1].index
	}
	if mark <= last {
		return nil
	}
	e := &MissingTailError{Dir: dir, Mark: mark, LastSegment: last, LastEntry: lastEntry}
	if des, err := os.ReadDir(dir); err == nil {
		for _, de := range des {
			// Only a file Open keeps (its segment gone): one whose segment
			// is still there may be a partial copy, which Open deletes,
			// and renamed it would finish a truncation with entries lost.
			if !de.IsDir() && isTruncationTemp(de.Name()) && !truncationSourceExists(dir, de.Name(), segs) {
				e.Kept = append(e.Kept, de.Name())
			}
		}
	}
	return e
}

// CheckTail returns a [MissingTailError] when the log in dir has lost its
// newest segments, reading only TAIL, the listing and the last segment (no
// lock, nothing changed). Open runs it before tidwall/wal opens the log
// (which makes a segment 1 in a directory left without any). It sees the
// segments as tidwall/wal will, after an interrupted truncation.
func CheckTail(dir string) error {
	mark, err := readTailMark(dir)
	if err != nil || mark == 0 {
		return err
	}
	all, err := listSegments(dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", dir, err)
	}
	segs, _, _, err := resolveSegments(all)
	if err != nil {
		return nil // conflicting truncation files: tidwall/wal's Open reports them
	}
	if n := len(segs); n > 0 && mark <= segs[n-1].index {
		return nil // the common case, without reading the segment
	}
	var lastEntry uint64
	if n := len(segs); n > 0 {
		data, err := os.ReadFile(filepath.Join(dir, segs[n-1].name))
		if err != nil {
			return fmt.Errorf("wal %s: segment %s: %w", dir, segs[n-1].name, err)
		}
		// The valid prefix, as the read-only walk counts it: the torn
		// tail is not cut yet (a refused open changes nothing).
		_, count := scanValid(inUse(data), segs[n-1].index)
		lastEntry = segs[n-1].index + uint64(count) - 1
	}
	return checkTail(dir, mark, segs, lastEntry)
}

// recordTail records the log's tail segment in TAIL when it names another
// (a directory of an older kvidx, or a tail segment TruncateFront
// renamed). The caller fsyncs the directory.
func (l *Log) recordTail() error {
	mark, err := readTailMark(l.dir)
	if err != nil {
		return err
	}
	segs, err := listSegments(l.dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", l.dir, err)
	}
	if len(segs) == 0 || segs[len(segs)-1].index == mark {
		return nil
	}
	if err := writeTailMark(l.dir, segs[len(segs)-1].index); err != nil {
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			// A restart on the disk that fenced the log at a segment
			// rollover, still full: the bare write error reads as
			// damage, and the operator needs to know that the log is
			// whole and what brings the node back.
			return fmt.Errorf("%w: the log is intact, no acknowledged entry was cut, but its newest segment cannot be recorded before entries are acknowledged in it: free some space on the filesystem of %s and start again", err, l.dir)
		}
		return err
	}
	return nil
}
