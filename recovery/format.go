package recovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvidx/kvidx/internal/smallfile"
	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// Layout names inside a data directory.
const (
	// FormatFileName holds the data directory's format line.
	FormatFileName = "FORMAT"
	// WALDirName is the write-ahead log's directory.
	WALDirName = "wal"
	// SnapshotDirName is the snapshots' directory.
	SnapshotDirName = "snapshots"
	// FormatVersion is the data directory format this package writes.
	// Version 2's WAL entries carry their own index (wal frame version 2),
	// which a kvidx of format 1 would take for a torn tail and cut: the
	// format line is what makes an older kvidx refuse the directory
	// instead. Open upgrades a format 1 directory (whose WAL it reads as
	// it is) before it appends.
	FormatVersion = 2
	// minFormatVersion is the oldest format Open opens.
	minFormatVersion = 1

	formatMagic = "kvidx-data"
)

// ErrFormat: the data directory's FORMAT file names a format this version
// does not read, or is damaged, or data exists without it.
var ErrFormat = errors.New("unsupported data directory format")

// CheckFormat applies Open's checks of dir's format without changing
// anything: it returns the FORMAT file's version, or 0 for a directory that
// Open would make a new data directory (no FORMAT file and no data). An
// error wrapping ErrFormat is a directory Open refuses for its format (a
// newer or unknown version, a damaged FORMAT file, data without one); any
// other error is a failure to read it.
func CheckFormat(dir string) (int, error) {
	v, err := readFormat(dir)
	if err != nil {
		return 0, err
	}
	if err := checkFormat(dir, v); err != nil {
		return v, err
	}
	if v == 0 {
		data, err := hasData(dir)
		if err != nil {
			return 0, err
		}
		if data {
			return 0, fmt.Errorf("data dir %s: holds a WAL or snapshots but no %s file: not a kvidx data directory of a known format: %w", dir, FormatFileName, ErrFormat)
		}
		if what := dataDirPart(dir); what != "" {
			return 0, fmt.Errorf("data dir %s: holds %s, as a data directory's %s/ directory does, and no %s file: give the data directory itself (%s?): %w",
				dir, what, filepath.Base(dir), FormatFileName, filepath.Dir(filepath.Clean(dir)), ErrFormat)
		}
	}
	return v, nil
}

// dataDirPart says what in dir, which has no FORMAT file, belongs in a data
// directory's wal/ or snapshots/ directory ("" if nothing does): a path
// mistyped as DATA_DIR/wal would otherwise start a new, empty index beside
// the real one, and a node would answer from nothing.
func dataDirPart(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == wal.LockFileName:
			return "a WAL lock file"
		case len(name) >= 20 && strings.Trim(name[:20], "0123456789") == "":
			return "WAL segment " + name
		case strings.HasSuffix(name, ".bolt") && strings.HasPrefix(name, "snapshot-"):
			return "snapshot " + name
		}
	}
	return ""
}

// readFormat returns the version in dir's FORMAT file, or 0 (and no error)
// when there is no FORMAT file.
// maxFormatBytes bounds the read of FORMAT, a one-line file: one grown
// large (a sparse file, a log copied over it) is refused, not read whole.
const maxFormatBytes = 256

func readFormat(dir string) (int, error) {
	path := filepath.Join(dir, FormatFileName)
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		// A named pipe would block the read for good.
		return 0, fmt.Errorf("data dir %s: %s is %s, not a file: move it out of %s and put the directory's %s file (%q) in its place",
			dir, path, smallfile.Kind(fi.Mode()), dir, FormatFileName, fmt.Sprintf("%s %d\n", formatMagic, FormatVersion))
	}
	b, err := smallfile.Read(path, maxFormatBytes)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if errors.Is(err, smallfile.ErrTooLarge) {
		return 0, fmt.Errorf("data dir %s: %s holds more than %d bytes, want %q: %w", dir, FormatFileName, maxFormatBytes, fmt.Sprintf("%s %d\n", formatMagic, FormatVersion), ErrFormat)
	}
	if err != nil {
		return 0, fmt.Errorf("data dir %s: %w", dir, err)
	}
	line, ok := strings.CutSuffix(string(b), "\n")
	fields := strings.Fields(line)
	if !ok || len(fields) != 2 || fields[0] != formatMagic {
		return 0, fmt.Errorf("data dir %s: %s is %q, want %q: %w", dir, FormatFileName, truncate(string(b), 64), fmt.Sprintf("%s %d\n", formatMagic, FormatVersion), ErrFormat)
	}
	v, err := strconv.Atoi(fields[1])
	if err != nil || v < 1 {
		return 0, fmt.Errorf("data dir %s: %s holds version %q: %w", dir, FormatFileName, fields[1], ErrFormat)
	}
	return v, nil
}

// checkFormat refuses a data directory of another format version.
func checkFormat(dir string, v int) error {
	if v > FormatVersion {
		return fmt.Errorf("data dir %s: format version %d is newer than this kvidx reads (%d): upgrade kvidx, do not downgrade a data directory: %w", dir, v, FormatVersion, ErrFormat)
	}
	if v != 0 && v < minFormatVersion {
		return fmt.Errorf("data dir %s: format version %d, this kvidx reads %d to %d: %w", dir, v, minFormatVersion, FormatVersion, ErrFormat)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// hasData tells whether dir already holds kvidx data: a WAL segment with
// entries or past index 1, or a published snapshot.
func hasData(dir string) (bool, error) {
	ents, err := os.ReadDir(filepath.Join(dir, WALDirName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("data dir %s: %w", dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if len(name) < 20 {
			continue
		}
		n, err := strconv.ParseUint(name[:20], 10, 64)
		if err != nil || n == 0 {
			continue
		}
		if n != 1 {
			return true, nil
		}
		if fi, err := e.Info(); err != nil || fi.Size() > 0 {
			return true, nil
		}
	}
	snaps, err := snapshot.List(filepath.Join(dir, SnapshotDirName))
	if err != nil {
		return false, err
	}
	return len(snaps) > 0, nil
}

// initDir makes dir a new data directory: snapshots dir, then the FORMAT
// file (see writeFormat), then the directory's parent, which may have just
// got it, fsynced.
func initDir(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, SnapshotDirName), 0o750); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := writeFormat(dir); err != nil {
		return err
	}
	for _, d := range []string{filepath.Join(dir, SnapshotDirName), filepath.Dir(dir)} {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// writeFormat writes dir's FORMAT file for FormatVersion: to a temporary
// name, fsynced, renamed, and the directory fsynced, so that a crash leaves
// the old line or the new one.
func writeFormat(dir string) error {
	path := filepath.Join(dir, FormatFileName)
	if err := smallfile.Write(path, fmt.Appendf(nil, "%s %d\n", formatMagic, FormatVersion), true); err != nil {
		return fmt.Errorf("data dir %s: write %s: %w", dir, FormatFileName, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
