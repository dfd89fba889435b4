package wal

// Torn-tail repair. [Open] repairs a torn tail before tidwall/wal sees it
// (tidwall's Open fails on a partial last entry): it walks the last segment
// (the one tidwall will use as its tail, honouring its .START/.END
// temporary names) validating each entry's frame. If it ends in an
// incomplete or invalid entry, and no complete valid entry starts anywhere
// in the bytes that would be dropped, the segment is truncated after the
// last good entry, fsynced with its directory, and the dropped byte count
// is logged and kept in [Stats].TornBytesDropped. If a valid entry follows
// the damage, the damage is in the middle: Open refuses with an error
// naming the segment file and byte offset. Damage found while reading
// ([Log.Entries]) is reported the same way ([ErrCorrupt]), never skipped;
// damage Open refuses is a [DamageError] naming the entry.
// [RepairTruncateAfter] and [RepairTruncateBefore] are the operator's
// explicit cuts (after the damage, losing what follows, or before it, when
// a snapshot holds what precedes); they keep a copy of what they remove.
//
// A crash during a truncation can leave the file tidwall/wal writes before
// renaming it .START or .END (<index>.START.TEMP, <index>.END.TEMP). While
// the segment it was copied from is there, that truncation never took
// effect and nothing reads the file, so Open deletes it (and logs it)
// rather than keep up to a segment's bytes for each crash. With that
// segment gone (a power loss that kept the removals but not the rename,
// which tidwall/wal does not fsync), the file may be the only copy of
// entries: Open keeps it and logs a warning, and renamed without .TEMP it
// finishes the truncation at the next open. When that segment was the last
// one, TAIL names a segment no longer there and Open refuses the log
// ([MissingTailError]) before it looks at the file; the refusal names the
// file and the rename to try before any repair (see tailmark.go).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/kvidx/kvidx/internal/smallfile"
)

// segFile is one tidwall/wal segment file: 20-digit first index, optionally
// with the .START (TruncateFront in progress) or .END (TruncateBack in
// progress) suffix tidwall/wal uses for its temporary segment names.
type segFile struct {
	name  string
	index uint64
	kind  string // "", ".START" or ".END"
}

// listSegments returns the directory's segment files in tidwall/wal's order
// (by name), with the same filter tidwall/wal applies when it opens, except
// that an entry with a segment's name that is not a regular file (nor a
// link to one) is refused, naming it, where tidwall/wal passes over a
// directory and opens anything else.
func listSegments(dir string) ([]segFile, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segFile
	for _, de := range des {
		name := de.Name()
		if len(name) < 20 {
			continue
		}
		index, err := strconv.ParseUint(name[:20], 10, 64)
		if err != nil || index == 0 {
			continue
		}
		var kind string
		switch {
		case len(name) == 20:
		case len(name) == 26 && strings.HasSuffix(name, ".START"):
			kind = ".START"
		case len(name) == 24 && strings.HasSuffix(name, ".END"):
			kind = ".END"
		default:
			continue
		}
		if !de.Type().IsRegular() {
			if err := checkSegmentFile(dir, name); err != nil {
				return nil, err
			}
		}
		segs = append(segs, segFile{name: name, index: index, kind: kind})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].name < segs[j].name })
	return segs, nil
}

// checkSegmentFile refuses an entry of dir with a segment's name that is
// not a regular file, nor a symbolic link to one: a directory (which
// tidwall/wal passes over, so the log looked as if its segment had been
// deleted), a named pipe (opening it blocked serve, recover and the
// offline tools for good), a device, a link that leads nowhere.
func checkSegmentFile(dir, name string) error {
	p := filepath.Join(dir, name)
	fi, err := os.Stat(p)
	if err != nil {
		// Not wrapped: a missing wal directory is told by ErrNotExist.
		return fmt.Errorf("segment %s: %v: a symbolic link that leads to no file has a segment's name; put the segment it linked to back, or move the link out of %s if it is no segment of this log", p, err, dir)
	}
	if fi.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("segment %s is %s, not a segment file: move it out of %s (if the log's segment of that name was moved elsewhere, put it back in its place)", p, smallfile.Kind(fi.Mode()), dir)
}

// isTruncationTemp reports whether name is the temporary file tidwall/wal's
// TruncateFront or TruncateBack (or startAt) writes before renaming it to
// its .START or .END name: a 20-digit index, then .START.TEMP or .END.TEMP.
func isTruncationTemp(name string) bool {
	rest, ok := strings.CutSuffix(name, ".TEMP")
	if !ok || len(rest) < 20 || strings.Trim(rest[:20], "0123456789") != "" {
		return false
	}
	return rest[20:] == ".START" || rest[20:] == ".END"
}

// removeTruncationTemps deletes the temporary files that truncations
// interrupted by a crash left in dir (see isTruncationTemp), when the
// segment each was copied from is still there: left, each crash would keep
// up to a segment's bytes for good. Call it with the directory locked.
//
// A file whose segment is gone is kept. tidwall/wal fsyncs the file, renames
// it to its .START or .END name and removes the segments it replaces with no
// directory fsync between them (it never fsyncs a directory), so a power
// loss on a filesystem that does not keep metadata changes in order may
// keep the removals and lose the rename: the file is then the only copy of
// acknowledged entries (from the cut on, or up to it), and deleting it
// would lose them without a word. The segment is removed only after the
// file is whole, so while it exists the file holds nothing else.
func removeTruncationTemps(dir string, logger *slog.Logger) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", dir, err)
	}
	segs, err := listSegments(dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", dir, err)
	}
	for _, de := range des {
		if de.IsDir() || !isTruncationTemp(de.Name()) {
			continue
		}
		path := filepath.Join(dir, de.Name())
		if !truncationSourceExists(dir, de.Name(), segs) {
			logger.Warn("wal: kept the temporary file of an interrupted truncation: the segment it was copied from is gone, and it may hold the only copy of entries (renamed without its .TEMP suffix, the next open finishes the truncation)",
				"dir", dir, "path", path)
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal %s: %w", dir, err)
		}
		logger.Info("wal: removed the temporary file of an interrupted truncation", "dir", dir, "path", path)
	}
	return nil
}

// truncationSourceExists reports whether the segment the truncation temp
// file name (see isTruncationTemp) was copied from is among segs, in dir:
// for <index>.START.TEMP the segment holding entry index whole (the last
// one that starts at or before it, if it reaches entry index: a filesystem
// that may lose the rename may as well keep the removal of that segment
// and lose the removal of one before it, so a segment left before index is
// not enough), for <index>.END.TEMP the segment starting at index.
func truncationSourceExists(dir, name string, segs []segFile) bool {
	index, err := strconv.ParseUint(name[:20], 10, 64)
	if err != nil {
		return false
	}
	front := strings.HasSuffix(name, ".START.TEMP")
	var holder *segFile
	for i, s := range segs {
		if s.kind != "" {
			continue
		}
		if s.index == index {
			return true
		}
		if front && s.index < index {
			holder = &segs[i]
		}
	}
	if holder == nil {
		return false
	}
	data, err := os.ReadFile(filepath.Join(dir, holder.name))
	if err != nil {
		return false
	}
	data, off := inUse(data), 0 // the tail segment's fill holds no entry
	for i := holder.index; i <= index; i++ {
		_, n, ok := nextEntry(data[off:])
		if !ok {
			return false
		}
		off += n
	}
	return true
}

// lastSegment returns the file tidwall/wal will open as its tail once it has
// finished an interrupted truncation: the first .END file if any (everything
// after it is deleted), else the last file by name (possibly a .START file,
// which is renamed in place). It returns "" when there is no segment.
func lastSegment(segs []segFile) string {
	for _, s := range segs {
		if s.kind == ".END" {
			return s.name
		}
	}
	if len(segs) == 0 {
		return ""
	}
	return segs[len(segs)-1].name
}

// nextEntry parses tidwall/wal's binary framing at the start of b:
// uvarint(len) then len bytes. ok is false if the entry is incomplete.
func nextEntry(b []byte) (payload []byte, n int, ok bool) {
	size, hn := binary.Uvarint(b)
	if hn <= 0 || size > uint64(len(b)-hn) {
		return nil, 0, false
	}
	return b[hn : hn+int(size)], hn + int(size), true
}

// ErrUnlocated is [RepairTruncateBefore]'s refusal to drop, unasked, valid
// entries after a framing break whose indexes cannot be located.
var ErrUnlocated = errors.New("entries after a framing break cannot be located")

// ErrNothingToCut is returned by RepairTruncateAfter and
// RepairTruncateBefore when the log already ends (or begins) where the cut
// would put it, or the index lies past the part it would cut: nothing is
// changed, and no backup is made.
var ErrNothingToCut = errors.New("nothing to cut")

// nextValid returns the offset of the first complete valid entry starting
// after b[off], or -1.
func nextValid(b []byte, off int) int {
	for p := off + 1; p < len(b); p++ {
		if validEntryAt(b[p:]) {
			return p
		}
	}
	return -1
}

// entryAtOrAfter returns the offset of the first complete, valid version 2
// frame in b that carries index or a later one, and the index it carries.
// Version 1 frames carry no index and are passed over.
func entryAtOrAfter(b []byte, index uint64) (off int, stored uint64, ok bool) {
	for p := range b {
		q, _, ok := nextEntry(b[p:])
		if !ok {
			continue
		}
		if stored, _, err := frameData(q); err == nil && stored >= index {
			return p, stored, true
		}
	}
	return 0, 0, false
}

// nextUnnumbered returns the offset of the first complete, valid version 1
// frame (one that carries no index) starting after b[off], or -1.
func nextUnnumbered(b []byte, off int) int {
	for p := off + 1; p < len(b); p++ {
		q, _, ok := nextEntry(b[p:])
		if !ok {
			continue
		}
		if stored, _, err := frameData(q); err == nil && stored == 0 {
			return p
		}
	}
	return -1
}

// storedIndexAt returns the index that the valid entry at b[next] carries
// when it starts where the valid prefix ends (next == good), else 0 (see
// DamageError.Found).
func storedIndexAt(b []byte, good, next int) uint64 {
	if next != good {
		return 0
	}
	q, _, ok := nextEntry(b[next:])
	if !ok {
		return 0
	}
	stored, _, err := frameData(q)
	if err != nil {
		return 0
	}
	return stored
}

// validEntryAt reports whether a complete entry with a valid kvidx frame
// starts at b[0].
func validEntryAt(b []byte) bool {
	p, _, ok := nextEntry(b)
	return ok && checkFrame(p) == nil
}

// scanValid walks data's entries, the first of them entry first, and
// returns the end offset of the longest prefix of complete entries with
// valid kvidx frames (a version 2 frame carrying the index it is read at),
// and how many there are.
func scanValid(data []byte, first uint64) (good, count int) {
	for good < len(data) {
		p, n, ok := nextEntry(data[good:])
		if !ok || checkFrameAt(p, first+uint64(count)) != nil {
			break
		}
		good += n
		count++
	}
	return good, count
}

// ValidPrefix returns how many entries segment data, whose first entry is
// entry first, holds whole and valid (checksum, and the index a version 2
// frame carries) before anything that is not: what a cut after them keeps
// readable.
func ValidPrefix(data []byte, first uint64) uint64 {
	_, n := scanValid(data, first)
	return uint64(n)
}

// validAtOrAfter returns the offset of the first complete valid entry
// starting at b[off] or after, or -1. Where a valid prefix ends at off, a
// valid frame at off itself carries another entry's index: entries are
// missing before it, and it is damage inside the log, not a torn tail.
func validAtOrAfter(b []byte, off int) int {
	if validEntryAt(b[off:]) {
		return off
	}
	return nextValid(b, off)
}

// repairTail cuts a torn tail off the directory's last segment (see the
// comment at the top of this file), fsyncing the directory with dirSync.
// It returns how many bytes it dropped.
func repairTail(dir string, logger *slog.Logger, dirSync func(string) error) (int64, error) {
	name, first, data, err := readLastSegment(dir)
	if err != nil || name == "" {
		return 0, err
	}
	path := filepath.Join(dir, name)
	unused := unusedTail(data)
	used := data[:len(data)-unused]
	good, count := scanValid(used, first)
	if good == len(data) {
		return 0, nil
	}
	if good == len(used) {
		// Only the writer's unused space follows the entries (see
		// prealloc.go): nothing torn.
		if err := truncateSync(path, int64(good)); err != nil {
			return 0, fmt.Errorf("wal %s: segment %s offset %d: trim unused space: %w", dir, name, good, err)
		}
		logger.Debug("wal: trimmed unused space", "dir", dir, "segment", name, "offset", good, "bytes", unused)
		return 0, nil
	}
	if p := validAtOrAfter(used, good); p >= 0 {
		return 0, &DamageError{Dir: dir, Segment: name, Offset: int64(good), Next: int64(p), Entry: first + uint64(count), Found: storedIndexAt(used, good, p)}
	}
	dropped := int64(len(used) - good)
	if err := truncateSync(path, int64(good)); err != nil {
		return 0, fmt.Errorf("wal %s: segment %s offset %d: repair torn tail: %w", dir, name, good, err)
	}
	if err := dirSync(dir); err != nil {
		return 0, err
	}
	logger.Warn("wal: cut torn tail", "dir", dir, "segment", name, "offset", good, "valid_entries", count, "dropped_bytes", dropped)
	return dropped, nil
}

// readLastSegment reads the segment file tidwall/wal will open as its tail
// (see lastSegment), and returns its name ("" when there is none) and
// first index.
func readLastSegment(dir string) (name string, first uint64, data []byte, err error) {
	segs, err := listSegments(dir)
	if err != nil {
		return "", 0, nil, fmt.Errorf("wal %s: %w", dir, err)
	}
	name = lastSegment(segs)
	if name == "" {
		return "", 0, nil, nil
	}
	for _, s := range segs {
		if s.name == name {
			first = s.index
		}
	}
	data, err = os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", 0, nil, fmt.Errorf("wal %s: segment %s: %w", dir, name, err)
	}
	return name, first, data, nil
}

// locate returns the segment file holding index and the byte offset of its
// entry, for error messages; the offset is -1 when that segment does not
// hold the entry whole. It walks tidwall/wal's framing only.
func locate(dir string, index uint64) (string, int64) {
	segs, err := listSegments(dir)
	if err != nil {
		return "?", -1
	}
	var seg *segFile
	for i := range segs {
		if segs[i].kind == "" && segs[i].index <= index {
			seg = &segs[i]
		}
	}
	if seg == nil {
		return "?", -1
	}
	data, err := os.ReadFile(filepath.Join(dir, seg.name))
	if err != nil {
		return seg.name, -1
	}
	off := 0
	for i := seg.index; i < index; i++ {
		_, n, ok := nextEntry(data[off:])
		if !ok {
			return seg.name, -1
		}
		off += n
	}
	if off >= len(data) { // entry index is not in this segment
		return seg.name, -1
	}
	return seg.name, int64(off)
}

// syncDir fsyncs a directory, so created, renamed, truncated and removed
// files are durable. tidwall/wal never does this itself.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal %s: sync directory: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal %s: sync directory: %w", dir, err)
	}
	return nil
}

// RepairTruncateAfter is the operator's explicit cut: it removes every entry
// after index from the log in dir, whatever their state, after copying each
// segment file it changes or deletes into backupDir (created if needed,
// files keep their names). backupDir must not be dir itself, and no file
// in it may already have a copy's name: an earlier backup is never
// overwritten, and nothing is cut unless every copy is whole and fsynced.
// dir must exist. It takes the directory lock, so no Log may have dir open. It walks tidwall/wal's framing only, not kvidx's CRCs, so it can
// cut just before a damaged entry that [Open] refuses. index must lie within
// the log's segments; index = first index - 1 empties the log. The cut
// rewrites TAIL (see tailmark.go) to name the segment that ends the log:
// a log refused as missing its newest segments ([MissingTailError]) is
// accepted as it is with index = its last entry.
func RepairTruncateAfter(dir string, index uint64, backupDir string) (err error) {
	lock, segs, err := lockForRepair(dir)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := lock.Unlock(); err == nil {
			err = uerr
		}
	}()
	if len(segs) == 0 {
		if mark, err := readTailMark(dir); err == nil && mark > 0 && index == 0 {
			// Every segment file is gone (see MissingTailError): the
			// cut after 0 accepts it, and the log starts anew.
			if err := os.Remove(filepath.Join(dir, TailMarkName)); err != nil {
				return fmt.Errorf("wal %s: %w", dir, err)
			}
			return syncDir(dir)
		}
		return fmt.Errorf("wal %s: no segments", dir)
	}
	// An index past the last whole entry is a mistake, not damage (the
	// walk below would call the missing entry incomplete, and index+1
	// overflows for the largest index).
	tail := segs[len(segs)-1]
	tailData, err := os.ReadFile(filepath.Join(dir, tail.name))
	if err != nil {
		return fmt.Errorf("wal %s: segment %s: %w", dir, tail.name, err)
	}
	tailData = inUse(tailData)
	whole, _, _ := Frames(tailData)
	if last := tail.index + whole - 1; index > last {
		return fmt.Errorf("wal %s: index %d is past the last entry %d: %w", dir, index, last, ErrNothingToCut)
	}
	mark, err := readTailMark(dir)
	if err != nil {
		return err
	}
	// The log's newest segments are missing (see tailmark.go): the cut
	// accepts their loss, whether or not it removes anything itself.
	lostTail := mark > tail.index
	// Find the segment holding entry index+1, the first one to drop.
	cut := index + 1
	si := -1
	for i := range segs {
		if segs[i].index <= cut {
			si = i
		}
	}
	if si < 0 {
		return fmt.Errorf("wal %s: index %d is before the first segment %s", dir, index, segs[0].name)
	}
	seg := segs[si]
	data, err := os.ReadFile(filepath.Join(dir, seg.name))
	if err != nil {
		return fmt.Errorf("wal %s: segment %s: %w", dir, seg.name, err)
	}
	if si == len(segs)-1 {
		data = inUse(data)
	}
	off := 0
	for i := seg.index; i < cut; i++ {
		_, n, ok := nextEntry(data[off:])
		if !ok {
			return fmt.Errorf("wal %s: segment %s offset %d: entry %d is not complete, cannot cut after %d: %w", dir, seg.name, off, i, index, ErrCorrupt)
		}
		off += n
	}
	if si == len(segs)-1 && off == len(data) {
		if lostTail {
			if err := writeTailMark(dir, tail.index); err != nil {
				return err
			}
			return syncDir(dir)
		}
		// Entry index ends the log: a cut would change nothing, and
		// reporting one (with a backup of the untouched tail) misleads.
		return fmt.Errorf("wal %s: entry %d is the last, with nothing after it: %w", dir, index, ErrNothingToCut)
	}
	if err := backupSegments(dir, backupDir, segs[si:]); err != nil {
		return err
	}
	// TAIL names the segment that ends the log once cut, before anything
	// is removed: a crash midway leaves a log that opens (TAIL naming a
	// segment still there), not one refused as missing its tail.
	newTail := seg.index
	if off == 0 && si > 0 {
		newTail = segs[si-1].index
	}
	if err := writeTailMark(dir, newTail); err != nil {
		return err
	}
	// Delete later segments from the last, then cut this one, so a crash
	// midway leaves a prefix of the log.
	for i := len(segs) - 1; i > si; i-- {
		if err := os.Remove(filepath.Join(dir, segs[i].name)); err != nil {
			return fmt.Errorf("wal %s: segment %s: %w", dir, segs[i].name, err)
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if off == 0 && si > 0 {
		// The whole segment goes: its predecessor becomes the tail.
		if err := os.Remove(filepath.Join(dir, seg.name)); err != nil {
			return fmt.Errorf("wal %s: segment %s: %w", dir, seg.name, err)
		}
	} else if err := truncateSync(filepath.Join(dir, seg.name), int64(off)); err != nil {
		return fmt.Errorf("wal %s: segment %s offset %d: %w", dir, seg.name, off, err)
	}
	return syncDir(dir)
}

// lockForRepair takes the lock of the log directory dir for a repair and
// lists its segments, refusing a directory that does not exist and a log
// with an interrupted truncation pending.
func lockForRepair(dir string) (*DirLock, []segFile, error) {
	// LockDir creates the directory: check first, so a mistyped path is
	// an error that leaves nothing behind (not an empty dir/LOCK).
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("wal %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, nil, fmt.Errorf("wal %s: not a directory", dir)
	}
	lock, err := LockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	segs, err := listSegments(dir)
	if err != nil {
		lock.Unlock()
		return nil, nil, fmt.Errorf("wal %s: %w", dir, err)
	}
	for _, s := range segs {
		if s.kind != "" {
			lock.Unlock()
			return nil, nil, fmt.Errorf("wal %s: segment %s: an interrupted truncation is pending; open the log once (or finish it by hand) first: %w", dir, s.name, ErrCorrupt)
		}
	}
	return lock, segs, nil
}

func truncateSync(path string, size int64) error {
	return withSyncedFile(path, os.O_RDWR, 0, func(f *os.File) error { return f.Truncate(size) })
}

// withSyncedFile opens path with flag and perm, runs op on the file, then
// fsyncs and closes it.
func withSyncedFile(path string, flag int, perm os.FileMode, op func(*os.File) error) error {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return err
	}
	if err := op(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// backupSegments copies segs from dir into backupDir (created if needed)
// and makes the copies durable. It refuses, before copying anything, a
// backup directory that is dir itself (the copies would overwrite the
// segments they copy) and a backup directory already holding a file of a
// segment's name (an earlier repair's backup, which must not be lost). On
// failure it removes the copies it made, so nothing may be cut: a cut is
// only safe once every copy is whole and fsynced.
func backupSegments(dir, backupDir string, segs []segFile) (err error) {
	if err := os.MkdirAll(backupDir, 0o750); err != nil {
		return fmt.Errorf("wal %s: backup: %w", dir, err)
	}
	dfi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("wal %s: %w", dir, err)
	}
	bfi, err := os.Stat(backupDir)
	if err != nil {
		return fmt.Errorf("wal %s: backup: %w", dir, err)
	}
	if os.SameFile(dfi, bfi) {
		return fmt.Errorf("wal %s: backup directory %s is the log directory itself: choose another one", dir, backupDir)
	}
	for _, s := range segs {
		dst := filepath.Join(backupDir, s.name)
		if _, err := os.Lstat(dst); err == nil {
			return fmt.Errorf("wal %s: backup file %s already exists (an earlier backup?): refusing to overwrite it; choose another backup directory", dir, dst)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal %s: backup: %w", dir, err)
		}
	}
	var made []string
	defer func() {
		if err != nil {
			for _, p := range made {
				os.Remove(p)
			}
		}
	}()
	for _, s := range segs {
		dst := filepath.Join(backupDir, s.name)
		created, err := copyFile(filepath.Join(dir, s.name), dst)
		if created {
			made = append(made, dst)
		}
		if err != nil {
			return fmt.Errorf("wal %s: backup segment %s to %s: %w", dir, s.name, dst, err)
		}
	}
	if err := syncDir(backupDir); err != nil {
		return err
	}
	// MkdirAll may have just created backupDir: make its entry durable too.
	return syncDir(filepath.Dir(filepath.Clean(backupDir)))
}

// copyFile copies src to a new file dst, fsynced. It never overwrites: dst
// must not exist (O_EXCL). created tells whether dst was created (and so
// may be removed again on failure).
func copyFile(src, dst string) (created bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return false, err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return false, err
	}
	n, err := io.Copy(out, in)
	if err == nil && n != fi.Size() {
		err = fmt.Errorf("copied %d bytes of %d", n, fi.Size())
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return true, err
}

// DamageError is the refusal of damage inside the log, from [Open] and
// from the read-only [Scan] and [Inspect]: entry Entry, at byte Offset of
// segment file Segment, is invalid, and a valid entry starts at byte Next.
// It matches [ErrCorrupt]. Its message names the operator's way out: kvidx
// wal repair --truncate-after Entry-1, which drops the damaged entry and
// every later one (recovery names --truncate-before instead when a snapshot
// holds the damaged entry: see recovery.DamageRefusal).
type DamageError struct {
	Dir, Segment string
	Offset, Next int64
	Entry        uint64
	// Found is, when Next == Offset, the index that the valid entry at
	// Offset carries (0: none, a version 1 frame): a later entry when the
	// ones between were lost, an earlier one when the segment file is not
	// the one its name says (renamed, or copied from elsewhere).
	Found uint64
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("%s: %v", e.Refusal("DATA_DIR"), ErrCorrupt)
}

// Refusal is the message without its error kind, its repair command naming
// dataDir.
func (e *DamageError) Refusal(dataDir string) string { return e.Where() + cutAfter(e.Entry, dataDir) }

// cutAfter is a refusal's way out of damage at entry: the cut after the
// entry before it.
func cutAfter(entry uint64, dataDir string) string {
	return fmt.Sprintf("; to drop entry %d and every later one, stop kvidx and run "+
		"kvidx wal repair %s --truncate-after %d --yes (it keeps a copy of what it cuts)", entry, ShellArg(dataDir), entry-1)
}

// ShellArg is s as one argument of a POSIX shell command line, quoted
// only when it needs to be: refusals name repair commands to paste, and
// a data directory's path may hold spaces or quotes.
func ShellArg(s string) string {
	if strings.HasPrefix(s, "-") {
		s = "./" + s // else read as a flag
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./,:@%+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// asCorrupt is err (an entry's decoding failure) as one that matches
// ErrCorrupt, wrapped only when it does not already.
func asCorrupt(err error) error {
	if errors.Is(err, ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

// EntryError is a damaged entry found reading the log: in a segment before
// the last (Open repairs or refuses only the last one), a segment short or
// badly framed, or an entry whose frame or data is invalid.
type EntryError struct {
	Dir, Segment string
	Offset       int64 // -1: the segment holds no whole entry Entry
	Entry        uint64
	Err          error // what is wrong; it wraps ErrCorrupt
}

func (e *EntryError) Error() string { return e.Where() }

// Where is the message's account of the damage.
func (e *EntryError) Where() string {
	if e.Offset < 0 {
		return fmt.Sprintf("wal %s: segment %s does not hold a whole entry %d (a later segment missing, or this one short or badly framed): %v",
			e.Dir, e.Segment, e.Entry, e.Err)
	}
	return fmt.Sprintf("wal %s: segment %s offset %d: entry %d: %v", e.Dir, e.Segment, e.Offset, e.Entry, e.Err)
}

// Refusal is the message with its repair command, naming dataDir.
func (e *EntryError) Refusal(dataDir string) string { return e.Where() + cutAfter(e.Entry, dataDir) }

func (e *EntryError) Unwrap() error { return e.Err }

// Where is the message's account of the damage alone, without the way out.
func (e *DamageError) Where() string {
	return fmt.Sprintf("wal %s: segment %s offset %d: entry %d is %s", e.Dir, e.Segment, e.Offset, e.Entry, e.what())
}

// what is the damage, as a Damage of a layout describes it.
func (e *DamageError) what() string {
	if e.Next == e.Offset {
		switch {
		case e.Found != 0 && e.Found < e.Entry && e.Offset == 0:
			return fmt.Sprintf("missing: the valid entry there is entry %d, an earlier one (damage inside the log, not a torn tail): "+
				"segment file %s begins with entry %d, as a segment file named %020d would (renamed, or copied from elsewhere?); "+
				"if it was renamed, putting it back under that name loses nothing", e.Found, e.Segment, e.Found, e.Found)
		case e.Found != 0 && e.Found < e.Entry:
			return fmt.Sprintf("missing: the valid entry there is entry %d, an earlier one (damage inside the log, not a torn tail)", e.Found)
		case e.Found > e.Entry:
			return fmt.Sprintf("missing: the valid entry there is entry %d, a later one (damage inside the log, not a torn tail)", e.Found)
		}
		return "missing: another valid entry is there (damage inside the log, not a torn tail)"
	}
	return fmt.Sprintf("invalid and followed by a valid entry at offset %d (damage inside the log, not a torn tail)", e.Next)
}

func (e *DamageError) Unwrap() error { return ErrCorrupt }

// RepairTruncateBefore removes, offline, every entry before index from the
// log in dir: the entries a snapshot at index-1 or later already holds,
// damaged or not. Every segment file it changes or deletes is first copied
// to backupDir, as [RepairTruncateAfter] does. index may lie past the
// log's last whole entry: the log is then left empty, and its next entry
// gets index; a log with no segment at all (dir empty) is made to begin at
// index likewise.
//
// Entry index is found by the index its frame carries (version 2 frames,
// what kvidx writes), so damage to the framing before it (a length prefix
// that swallows the next entries, or breaks the framing) does not move the
// cut; if that segment holds no valid frame of index but one of a later
// entry, entry index is damaged and it refuses. Version 1 frames (logs
// written before) carry no index and are found by counting frames: when
// the last segment's framing breaks before index, the entries after the
// break cannot be located, and may be entries index and later. If valid
// version 1 entries follow the break, it refuses unless dropUnlocated; then
// they are dropped with the rest, and unlocated is how many bytes that was
// (bytes holding no valid entry, a torn tail, are always dropped). It also
// refuses when counting lands on no valid entry at index but valid entries
// follow: the log's numbering cannot be trusted. The caller checks that a
// snapshot covers what is removed; without one, recovery refuses the log.
// It takes the directory lock, so no Log may have dir open.
//
// It writes the kept part of the segment holding index as tidwall/wal's
// TruncateFront does: a new segment named index with the .START suffix
// (written whole and fsynced under a temporary name first), then the
// segments before it are deleted and it is renamed. A
// crash midway leaves a log that Open (tidwall/wal's own recovery of an
// interrupted TruncateFront) finishes cutting.
func RepairTruncateBefore(dir string, index uint64, backupDir string, dropUnlocated bool) (unlocated int64, err error) {
	return repairTruncateBefore(dir, index, backupDir, dropUnlocated, nil)
}

// repairTruncateBefore is RepairTruncateBefore; crash, when not nil (tests),
// is called after each step that changes the directory, with the file the
// step wrote or removed: it may change the directory as a crash there would
// leave it, and panic.
func repairTruncateBefore(dir string, index uint64, backupDir string, dropUnlocated bool, crash func(step, path string)) (unlocated int64, err error) {
	crashPoint := func(step, path string) {
		if crash != nil {
			crash(step, path)
		}
	}
	lock, segs, err := lockForRepair(dir)
	if err != nil {
		return 0, err
	}
	defer func() {
		if uerr := lock.Unlock(); err == nil {
			err = uerr
		}
	}()
	if len(segs) == 0 {
		// An empty log (its segments lost, or never written) continues at
		// index: nothing to back up or remove.
		if index == 0 {
			return 0, fmt.Errorf("wal %s: index 0: WAL indexes start at 1", dir)
		}
		if err := markRestart(dir, index, 0); err != nil {
			return 0, err
		}
		return 0, startAt(dir, index, nil, nil, crashPoint)
	}
	if index <= segs[0].index {
		return 0, fmt.Errorf("wal %s: index %d is not after the first entry %d: %w", dir, index, segs[0].index, ErrNothingToCut)
	}
	si, kept, restart, unlocated, err := locateBefore(dir, segs, index, dropUnlocated)
	if err != nil {
		return 0, err
	}
	if err := backupSegments(dir, backupDir, segs[:si+1]); err != nil {
		return 0, err
	}
	if restart {
		if err := markRestart(dir, index, segs[len(segs)-1].index); err != nil {
			return 0, err
		}
	}
	return unlocated, startAt(dir, index, kept, segs[:si+1], crashPoint)
}

// locateBefore is the read-only part of [RepairTruncateBefore]: it finds
// entry index in the log's segments segs (index after the first entry),
// returning the segment holding it, the bytes kept from it, whether the log
// restarts at index (past its end), and the unlocated bytes dropped; or
// why the cut cannot be made.
func locateBefore(dir string, segs []segFile, index uint64, dropUnlocated bool) (si int, kept []byte, restart bool, unlocated int64, err error) {
	// The segment holding entry index (the last one starting at or before
	// it), and the offset of that entry in it; past the log's end, nothing
	// is kept.
	for i := range segs {
		if segs[i].index <= index {
			si = i
		}
	}
	seg := segs[si]
	data, err := os.ReadFile(filepath.Join(dir, seg.name))
	if err != nil {
		return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s: %w", dir, seg.name, err)
	}
	if si == len(segs)-1 {
		data = inUse(data)
	}
	// Walk the framing as Open and the readers number entries: at is entry
	// index's offset if the walk reaches it over sound frames (valid, and
	// carrying their own index where a version 2 frame carries one), bad
	// the offset of the first frame that is not sound, or where the
	// framing breaks (len(data): nowhere).
	// Version 1 frames carry no index, so where they lie before entry
	// index only the count of frames places it, and counting is trusted
	// only where nothing says it is off: swallowed, an unsound frame before
	// index's place holds the start of a valid frame (a damaged length
	// prefix took in the next entries); mislabelled, a valid version 2
	// frame is not the entry its place by count says (entries went missing
	// or came twice before it); and the segment, if not the last, must hold
	// as many frames as the next one's name says.
	framed, whole := 0, uint64(0) // bytes and entries of the segment's whole frames
	at, bad := -1, len(data)
	swallowed, mislabelled, v1BeforeAt, v2AfterBad := false, false, false, false
	for {
		p, n, ok := nextEntry(data[framed:])
		if !ok {
			if framed < len(data) {
				bad = min(bad, framed)
			}
			break
		}
		stored, _, ferr := frameData(p)
		switch {
		case ferr != nil || stored != 0 && stored != seg.index+whole:
			bad = min(bad, framed)
			if ferr == nil {
				mislabelled = true
			}
			if seg.index+whole < index {
				if q := nextValid(data, framed); q >= 0 && q < framed+n {
					swallowed = true
				}
			}
		case bad == len(data) && seg.index+whole <= index:
			if seg.index+whole == index {
				at = framed
			}
			v1BeforeAt = v1BeforeAt || stored == 0
		case bad < framed && stored != 0:
			v2AfterBad = true
		}
		framed += n
		whole++
	}
	countOK := !mislabelled && (si == len(segs)-1 || whole == segs[si+1].index-seg.index)
	if at >= 0 && v1BeforeAt && !countOK {
		at = -1 // placed by a count that is off: located below, or refused
	}
	located := at >= 0
	if located {
		kept = data[at:]
	} else if bad < len(data) {
		// Damage at or before entry index: a version 2 frame carries its
		// index, so entry index can still be found past the damage (a
		// length prefix that swallowed the next entries hides them from
		// the walk). Only past it: bytes inside a sound entry may spell a
		// frame (block hashes are any 64-bit values), and the walk has
		// read those as entries. What lies between is entries before
		// index, or damage among them, which is what the cut is for.
		if p, stored, ok := entryAtOrAfter(data[bad:], index); ok {
			switch {
			case stored == index:
				kept, located = data[bad+p:], true
			case nextUnnumbered(data, bad-1) < 0 || nextUnnumbered(data, bad-1) >= bad+p:
				return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s: entry %d is missing or damaged (the first valid entry after it is entry %d, at offset %d): "+
					"a cut before %d cannot keep it; nothing was changed: %w", dir, seg.name, index, stored, bad+p, index, ErrCorrupt)
			}
			// Else version 1 frames (no index) lie before it: a log an
			// older kvidx began; entry index is found by counting below.
		}
	}
	if !located && swallowed {
		return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s offset %d: a damaged entry before entry %d takes in valid ones (its length prefix is damaged), and frames without an index follow: "+
			"the entries from there on cannot be located, and a cut would keep the wrong ones; nothing was changed: %w", dir, seg.name, bad, index, ErrCorrupt)
	}
	switch {
	case located:
	case si < len(segs)-1 || index-seg.index < whole:
		off := 0
		for i := seg.index; i < index; i++ {
			_, n, ok := nextEntry(data[off:])
			if !ok {
				return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s offset %d: entry %d is not complete, cannot find entry %d: %w", dir, seg.name, off, i, index, ErrCorrupt)
			}
			off += n
		}
		// A count that is off (see the walk), or damage before entry index
		// in the last segment with no version 2 frame after it to confirm
		// the count: the entries from there on cannot be numbered.
		if !countOK || bad < off && si == len(segs)-1 && !v2AfterBad {
			return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s offset %d: the framing before entry %d is damaged, and the frames after the damage carry no index that confirms their count: "+
				"the entries from there on cannot be located, and a cut would keep the wrong ones; nothing was changed: %w", dir, seg.name, bad, index, ErrCorrupt)
		}
		// In a segment before the last, entry index must be there and
		// whole: the next segment starts after it.
		if si < len(segs)-1 && !validEntryAt(data[off:]) {
			return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s offset %d: entry %d is missing or damaged (the next segment, %s, starts at entry %d): a cut before %d cannot keep it; nothing was changed: %w",
				dir, seg.name, off, index, segs[si+1].name, segs[si+1].index, index, ErrCorrupt)
		}
		// The walk counts frames, damaged or not: a damaged length
		// prefix before index makes it count garbage as entries, and
		// the cut would land inside an entry, numbering every later
		// one wrong (and Open would refuse the log again).
		if q, _, ok := nextEntry(data[off:]); ok {
			// No valid frame carries index or later: one that carries
			// an index here is an earlier entry, miscounted.
			if stored, _, err := frameData(q); err == nil && stored != 0 {
				return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s offset %d: counting frames finds entry %d there, which is entry %d: the framing before it is damaged and entry %d is missing; nothing was changed: %w",
					dir, seg.name, off, index, stored, index, ErrCorrupt)
			}
		}
		if !validEntryAt(data[off:]) {
			if p := nextValid(data, off); p >= 0 {
				return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s offset %d: the framing before entry %d is damaged (offset %d holds no valid entry, one starts at offset %d): "+
					"the entries from there on cannot be located, and a cut there would number them wrong; nothing was changed: %w",
					dir, seg.name, off, index, off, p, ErrCorrupt)
			}
		}
		kept = data[off:]
	default:
		// Past the end: everything goes, and the log restarts at index.
		restart = true
		si = len(segs) - 1
		unlocated = int64(len(data) - framed)
		// No valid frame past the damage carries index or later (see
		// above), but a version 1 frame carries no index: valid ones after the break may
		// be entries index and later, which no snapshot holds, and
		// dropping them needs the caller's word.
		if p := nextUnnumbered(data, framed); p >= 0 && !dropUnlocated {
			return 0, nil, false, 0, fmt.Errorf("wal %s: segment %s offset %d: the framing breaks after entry %d, and valid entries follow from offset %d: "+
				"their indexes cannot be located, so they may be entries %d and later, which the cut must keep; nothing was changed "+
				"(to drop them with the rest, a copy kept, the caller must allow it explicitly): %w (%w)",
				dir, seg.name, framed, seg.index+whole-1, p, index, ErrUnlocated, ErrCorrupt)
		}
	}
	return si, kept, restart, unlocated, nil
}

// markRestart prepares TAIL for a log in dir that restarts at index, its
// last segment now starting at last (0: none). A TAIL past last names
// segments already missing (see MissingTailError), which the restart
// leaves behind: it names the new log's tail instead, first, so that a
// crash midway leaves the old log (refused as before, and a second run of
// the repair finishes it) and never the new one refused for the old one's
// loss. Otherwise TAIL is left as it is: after the restart it names a
// segment before the new one, and Open then records the new tail.
func markRestart(dir string, index, last uint64) error {
	mark, err := readTailMark(dir)
	if err != nil || mark <= last {
		return err
	}
	if err := writeTailMark(dir, index); err != nil {
		return err
	}
	return syncDir(dir)
}

// startAt makes the log in dir begin at index with the entries in kept (a
// segment's bytes from entry index on), replacing the segments drop.
func startAt(dir string, index uint64, kept []byte, drop []segFile, crashPoint func(step, path string)) error {
	final := fmt.Sprintf("%020d", index)
	start := filepath.Join(dir, final+".START")
	// The .START file must be whole once it has its name: tidwall/wal's
	// Open deletes every segment before it, whatever it holds. It is
	// written under a name Open ignores, fsynced, then renamed (as
	// tidwall's own TruncateFront does).
	tmp := start + ".TEMP"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wal %s: %w", dir, err)
	}
	if err := writeSync(tmp, kept); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("wal %s: segment %s: %w", dir, final+".START", err)
	}
	crashPoint("written", tmp)
	if err := os.Rename(tmp, start); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("wal %s: segment %s: %w", dir, final+".START", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	for _, s := range drop {
		if err := os.Remove(filepath.Join(dir, s.name)); err != nil {
			return fmt.Errorf("wal %s: segment %s: %w", dir, s.name, err)
		}
		crashPoint("removed", filepath.Join(dir, s.name))
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.Rename(start, filepath.Join(dir, final)); err != nil {
		return fmt.Errorf("wal %s: segment %s: %w", dir, final, err)
	}
	return syncDir(dir)
}

// writeSync writes data to a new file at path and fsyncs it.
func writeSync(path string, data []byte) error {
	return withSyncedFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// HoldsIndexed reports whether the segment of the WAL in dir whose first
// entry is segment holds entry index in a whole, valid version 2 frame:
// [RepairTruncateBefore] finds that entry by the index its frame carries,
// even past damage to the framing before it.
func HoldsIndexed(dir string, segment, index uint64) bool {
	data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%020d", segment)))
	if err != nil {
		return false
	}
	_, stored, ok := entryAtOrAfter(data, index)
	return ok && stored == index
}

// Locatable reports whether [RepairTruncateBefore] can cut the WAL in dir
// before entry index: it locates entry index as the repair would (by the
// log's framing, or past damage by the index its frame carries), or index
// is past the log's end (the cut then removes every entry). Valid entries
// that the repair could drop only with dropUnlocated count as locatable:
// its refusal names that flag. It reads the directory only. An index at or
// before the log's first entry is not: there is nothing before it to cut.
// A directory that cannot be read, or an interrupted truncation pending,
// reports true: the repair decides, and says why.
func Locatable(dir string, index uint64) bool {
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		return true
	}
	for _, s := range segs {
		if s.kind != "" {
			return true
		}
	}
	if index <= segs[0].index {
		return false
	}
	_, _, _, _, err = locateBefore(dir, segs, index, false)
	return err == nil || errors.Is(err, ErrUnlocated)
}
