package wal

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An entry with a segment's name that is not a segment file is refused by
// Open, Inspect and Scan, naming it and saying to move it out: a named pipe
// blocked every one of them for good (serve, recover, wal stat, inspect
// summary hung), and a directory was passed over, so that a log whose
// newest segment was replaced by one was refused as one whose segment had
// been deleted. A link to a segment kept elsewhere still opens.
func TestSegmentNameNotAFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		make   func(path string) error
		refuse string
	}{
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, "is a directory, not a segment file: move it out of "},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "not a segment file: move it out of "},
		{"dangling link", func(p string) error { return os.Symlink(p+".gone", p) }, "move the link out of "},
		{"link loop", func(p string) error { return os.Symlink(filepath.Base(p), p) }, "move the link out of "},
		{"link to the segment", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, elsewhere := t.TempDir(), t.TempDir()
			segs := segmentedLog(t, dir, 40)
			last := filepath.Join(dir, segs[len(segs)-1].name)
			moved := filepath.Join(elsewhere, segs[len(segs)-1].name)
			if err := os.Rename(last, moved); err != nil {
				t.Fatal(err)
			}
			mk := tc.make
			if mk == nil {
				mk = func(p string) error { return os.Symlink(moved, p) }
			}
			if err := mk(last); err != nil {
				t.Fatal(err)
			}
			for _, op := range []struct {
				name string
				run  func() error
			}{
				{"Inspect", func() error { _, err := Inspect(dir); return err }},
				{"Scan", func() error { _, _, err := scanAll(t, dir, 1, 40); return err }},
				{"Open", func() error { return openErr(dir) }},
			} {
				done := make(chan error, 1)
				go func() { done <- op.run() }()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					// Let the blocked open of the pipe return.
					if f, err := os.OpenFile(last, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
					<-done
					t.Fatalf("%s: still running after 10 s", op.name)
				}
				if tc.refuse == "" {
					if err != nil {
						t.Fatalf("%s through a link to the segment: %v", op.name, err)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), last) || !strings.Contains(err.Error(), tc.refuse+dir) {
					t.Fatalf("%s: %v, want a refusal naming %s and saying %q", op.name, err, last, tc.refuse+dir)
				}
			}
		})
	}
}

// A TAIL that is not a file is refused, naming it, by Open, Inspect and
// Scan: a named pipe blocked them for good.
func TestTailMarkNotAFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, "is a directory, not a file: move it out of "},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "not a file: move it out of "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			segmentedLog(t, dir, 40)
			tail := filepath.Join(dir, TailMarkName)
			if err := os.Remove(tail); err != nil {
				t.Fatal(err)
			}
			if err := tc.make(tail); err != nil {
				t.Fatal(err)
			}
			for _, op := range []struct {
				name string
				run  func() error
			}{
				{"Inspect", func() error { _, err := Inspect(dir); return err }},
				{"Scan", func() error { _, _, err := scanAll(t, dir, 1, 40); return err }},
				{"Open", func() error { return openErr(dir) }},
			} {
				done := make(chan error, 1)
				go func() { done <- op.run() }()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					if f, err := os.OpenFile(tail, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
					<-done
					t.Fatalf("%s: still running after 10 s", op.name)
				}
				if err == nil || !strings.Contains(err.Error(), tail) || !strings.Contains(err.Error(), tc.want+dir) {
					t.Fatalf("%s: %v, want a refusal naming %s and saying %q", op.name, err, tail, tc.want+dir)
				}
			}
		})
	}
}

// A TAIL file grown large (here a sparse terabyte) holds no index: the log
// opens as one without TAIL does, and the file is not read whole.
func TestTailMarkTooLarge(t *testing.T) {
	dir := t.TempDir()
	segmentedLog(t, dir, 40)
	if err := os.Truncate(filepath.Join(dir, TailMarkName), 1<<40); err != nil {
		t.Fatal(err)
	}
	if n, err := readTailMark(dir); n != 0 || err != nil {
		t.Fatalf("readTailMark of a 1 TiB TAIL: %d, %v; want 0, nil", n, err)
	}
	if _, err := Inspect(dir); err != nil {
		t.Fatalf("Inspect: %v", err)
	}
}
