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
			runReadOps(t, dir, last, func(op string, err error) {
				t.Helper()
				if tc.refuse == "" {
					if err != nil {
						t.Fatalf("%s through a link to the segment: %v", op, err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), last) || !strings.Contains(err.Error(), tc.refuse+dir) {
					t.Fatalf("%s: %v, want a refusal naming %s and saying %q", op, err, last, tc.refuse+dir)
				}
			})
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
			runReadOps(t, dir, tail, func(op string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), tail) || !strings.Contains(err.Error(), tc.want+dir) {
					t.Fatalf("%s: %v, want a refusal naming %s and saying %q", op, err, tail, tc.want+dir)
				}
			})
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

// runReadOps runs Inspect, Scan (entries 1..40) and Open on the log in dir
// and calls check with each one's name and error. Each gets 10 s: then a
// writer opens pipe (letting an open of that named pipe, blocked for want
// of one, return) and the test fails.
func runReadOps(t *testing.T, dir, pipe string, check func(op string, err error)) {
	t.Helper()
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
		select {
		case err := <-done:
			check(op.name, err)
		case <-time.After(10 * time.Second):
			if f, err := os.OpenFile(pipe, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			<-done
			t.Fatalf("%s: still running after 10 s", op.name)
		}
	}
}
