package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	tmp := filepath.Join(dir, TailMarkName+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(first, 10)+"\n"), 0o640); err != nil {
		return fmt.Errorf("wal %s: write %s: %w", dir, TailMarkName, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, TailMarkName)); err != nil {
		return fmt.Errorf("wal %s: write %s: %w", dir, TailMarkName, err)
	}
	return nil
}

// readTailMark returns the first index TAIL records, 0 when there is no
// such file or it does not hold one.
func readTailMark(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, TailMarkName))
	if errors.Is(err, os.ErrNotExist) {
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
// It matches [ErrCorrupt].
type MissingTailError struct {
	Dir         string
	Mark        uint64
	LastSegment uint64
	LastEntry   uint64
}

func (e *MissingTailError) Error() string {
	return fmt.Sprintf("%s: %v", e.Refusal("DATA_DIR"), ErrCorrupt)
}

// Where is the message's account of the loss alone, without the way out.
func (e *MissingTailError) Where() string {
	return fmt.Sprintf("wal %s: segment %020d is missing: the log wrote entries to it (%s names it as the newest segment), "+
		"but the segment files found end with entry %d, so entries from %d on are gone, acknowledged ones among them "+
		"(deleted by hand, or left out of a copy?)", e.Dir, e.Mark, TailMarkName, e.LastEntry, max(e.LastEntry+1, 1))
}

// Refusal is the message with its way out, naming dataDir.
func (e *MissingTailError) Refusal(dataDir string) string {
	return e.Where() + fmt.Sprintf("; put the missing segment files back, or, to go on without those entries, stop kvidx and run "+
		"kvidx wal repair %s --truncate-after %d --yes", dataDir, e.LastEntry)
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
	return &MissingTailError{Dir: dir, Mark: mark, LastSegment: last, LastEntry: lastEntry}
}

// checkTail refuses, at open, a log whose newest segment is missing (last
// is the last entry tidwall/wal found), and otherwise records the current
// tail segment in TAIL when it names another (a directory of an older
// kvidx, or a tail segment TruncateFront renamed). The caller fsyncs the
// directory.
func (l *Log) checkTail(last uint64) error {
	mark, err := readTailMark(l.dir)
	if err != nil {
		return err
	}
	segs, err := listSegments(l.dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", l.dir, err)
	}
	if err := checkTail(l.dir, mark, segs, last); err != nil {
		return err
	}
	if len(segs) == 0 || segs[len(segs)-1].index == mark {
		return nil
	}
	return writeTailMark(l.dir, segs[len(segs)-1].index)
}
