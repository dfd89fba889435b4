package snapshot

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kvidx/kvidx/internal/smallfile"
)

// DefaultKeep is how many snapshots Prune keeps when asked to keep fewer than one.
const DefaultKeep = 2

// FileName returns the name of the snapshot of WAL index n:
// snapshot-<n as 20 digits>.bolt, so names sort like indexes.
func FileName(n uint64) string { return fmt.Sprintf("snapshot-%020d.bolt", n) }

// ParseFileName returns the WAL index of a snapshot file name (not a path),
// or false if name is not one.
func ParseFileName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "snapshot-")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, ".bolt")
	if !ok || len(s) != 20 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// isTemp reports whether name is a temporary file left by Write.
func isTemp(name string) bool {
	return strings.HasPrefix(name, ".snapshot-") && strings.Contains(name, ".tmp-")
}

// File is one published snapshot in a directory.
type File struct {
	Path  string
	Index uint64 // WAL index
	Size  int64
}

// List returns the published snapshots in dir, newest (highest WAL index)
// first. It does not open them. A missing dir holds no snapshot. A symbolic
// link is followed (an operator may link a snapshot kept elsewhere), and
// one that leads to no regular file, like any other entry that is not a
// regular file, is passed over.
func List(dir string) ([]File, error) {
	ents, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, e := range ents {
		n, ok := ParseFileName(e.Name())
		if !ok || !e.Type().IsRegular() && e.Type() != fs.ModeSymlink {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // pruned meanwhile, or a dangling link
			}
			return nil, fmt.Errorf("snapshot dir %s: %w", dir, err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, File{Path: filepath.Join(dir, e.Name()), Index: n, Size: fi.Size()})
	}
	slices.SortFunc(out, func(a, b File) int { return cmp.Compare(b.Index, a.Index) })
	return out, nil
}

// readDir lists dir for List and TempFiles: a missing dir holds nothing.
func readDir(dir string) ([]os.DirEntry, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot dir %s: %w", dir, err)
	}
	return ents, nil
}

// PassedOver describes the entries of dir named like snapshots that [List]
// passes over: a directory, a symbolic link that leads to no regular file
// (its target gone, a volume not mounted), any other entry that is not a
// regular file. Recovery does without them; a refusal names them, since
// one may be the snapshot it needs.
func PassedOver(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if _, ok := ParseFileName(e.Name()); !ok || e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if e.Type() != fs.ModeSymlink {
			out = append(out, fmt.Sprintf("%s is %s, not a snapshot file", p, smallfile.Kind(e.Type())))
			continue
		}
		target, _ := os.Readlink(p)
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("%s is a symbolic link to %s, which cannot be read (%v)", p, target, err))
		case !fi.Mode().IsRegular():
			out = append(out, fmt.Sprintf("%s is a symbolic link to %s, not a regular file", p, target))
		}
	}
	return out
}

// Prune deletes the snapshots of dir older than the newest keep (DefaultKeep
// when keep < 1) that usable accepts (every one, when usable is nil), and
// returns the deleted paths. Snapshots usable rejects do not count towards
// keep: those newer than the oldest one kept stay, the others go. Call it
// only after the newest snapshot is published.
func Prune(dir string, keep int, usable func(File) bool) ([]string, error) {
	if keep < 1 {
		keep = DefaultKeep
	}
	files, err := List(dir)
	if err != nil {
		return nil, err
	}
	var old []string
	kept := 0
	for _, f := range files { // newest first
		if kept < keep {
			if usable == nil || usable(f) {
				kept++
			}
			continue
		}
		old = append(old, f.Path)
	}
	return removeSynced(dir, old, "prune")
}

// CheckWritable creates a temporary file in dir, as a [Write] into dir
// first does, and removes it: a snapshot directory that this process cannot
// create files in (a read-only mount, another owner, write without search
// permission, an ACL) is then found at once, not at the first snapshot. It
// asks the filesystem rather than predicting from permission bits, which
// a process's capabilities, ACLs and mounts all bypass or override. A
// file left by a crash between the two steps is a temporary file that
// [CleanTemp] removes.
func CheckWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".snapshot-probe.tmp-*")
	if err != nil {
		return fmt.Errorf("snapshot dir %s: no file can be created there: %w", dir, err)
	}
	name := f.Name()
	if err := errors.Join(f.Close(), os.Remove(name)); err != nil {
		return fmt.Errorf("snapshot dir %s: removing the file made to check it: %w", dir, err)
	}
	return nil
}

// CleanTemp deletes the temporary files that interrupted writes left in dir
// and returns their paths. Call it when no Write into dir is running (at
// startup, before recovery).
func CleanTemp(dir string) ([]string, error) {
	temps, err := TempFiles(dir)
	if err != nil {
		return nil, err
	}
	return removeSynced(dir, temps, "clean")
}

// TempFiles returns the paths of the temporary files that interrupted
// writes left in dir, the ones [CleanTemp] deletes, in name order. It only
// reads dir. A missing dir holds none.
func TempFiles(dir string) ([]string, error) {
	ents, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	var temps []string
	for _, e := range ents {
		if !isTemp(e.Name()) || e.IsDir() {
			continue
		}
		temps = append(temps, filepath.Join(dir, e.Name()))
	}
	return temps, nil
}

// removeSynced deletes paths, files of dir, in order (one already gone
// counts as deleted), then makes the deletions durable. It returns the
// paths deleted, up to a failure; op names the caller in errors.
func removeSynced(dir string, paths []string, op string) ([]string, error) {
	var removed []string
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("snapshot %s: %s: %w", p, op, err)
		}
		removed = append(removed, p)
	}
	if len(removed) > 0 {
		if err := syncDir(dir); err != nil {
			return removed, fmt.Errorf("snapshot dir %s: %w", dir, err)
		}
	}
	return removed, nil
}
