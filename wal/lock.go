package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LockFileName is the name of the lock file in a log directory.
const LockFileName = "LOCK"

// DirLock is an exclusive flock on a log directory's lock file. One writer
// per directory: [Open] takes it unless [Options.DirLock] hands it one already
// held, so recovery tools can lock the directory before anything else.
type DirLock struct {
	dir string
	f   *os.File
}

// LockDir creates dir if needed and takes its lock without waiting
// (flock LOCK_EX|LOCK_NB). If another process, or another Log or DirLock of
// this process, holds it, LockDir fails with an error wrapping [ErrLocked]
// that names the directory.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("wal %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("wal %s: open lock file: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("wal %s: directory is in use by another writer (lock file %s held): %w", dir, path, ErrLocked)
		}
		return nil, fmt.Errorf("wal %s: flock %s: %w", dir, path, err)
	}
	return &DirLock{dir: dir, f: f}, nil
}

// Dir returns the locked directory.
func (l *DirLock) Dir() string { return l.dir }

// Unlock releases the lock. It is safe to call more than once.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the only descriptor releases the flock
	l.f = nil
	if err != nil {
		return fmt.Errorf("wal %s: release lock: %w", l.dir, err)
	}
	return nil
}
