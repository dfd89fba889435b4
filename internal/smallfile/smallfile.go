package smallfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrTooLarge is returned, wrapped, for a file longer than the bound.
var ErrTooLarge = errors.New("file too large")

// Read returns the contents of the file at path, or an error wrapping
// ErrTooLarge when it holds more than max bytes. It reads at most max+1
// bytes whatever the file's size.
func Read(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", path, max, ErrTooLarge)
	}
	return b, nil
}

// Write replaces the file at path with data, through path+".tmp" renamed
// over it, and with sync fsyncs the temporary file before the rename (the
// caller fsyncs the directory). A named pipe (or socket, or device node)
// at the temporary name is removed first, and the open does not wait for
// a reader: opening a pipe for writing blocked until one came, for good.
// A regular file or a link there is truncated and written, as before.
func Write(path string, data []byte, sync bool) (err error) {
	tmp := path + ".tmp"
	if fi, err := os.Lstat(tmp); err == nil && !fi.Mode().IsRegular() && fi.Mode()&os.ModeSymlink == 0 {
		if err := os.Remove(tmp); err != nil {
			return err
		}
	}
	// O_NONBLOCK: a link to a named pipe without a reader fails (ENXIO)
	// instead of blocking; it changes nothing for a regular file.
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_NONBLOCK, 0o640)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Not left behind: on a full disk it is a partial file that a
			// later listing of the directory would have to explain.
			os.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Kind says what a path of the given mode, which is not a regular file,
// is, for a refusal's "PATH is KIND, not a file": "a directory", or "of
// type" and the mode's type letters (a named pipe: "of type p---------").
func Kind(mode fs.FileMode) string {
	if mode.IsDir() {
		return "a directory"
	}
	return "of type " + mode.Type().String()
}
