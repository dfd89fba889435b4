package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FORMAT that is not a file is refused, naming it and saying what to
// put there: a named pipe blocked CheckFormat (and so serve, recover and
// inspect summary) for good.
func TestFormatNotAFile(t *testing.T) {
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
			p := filepath.Join(dir, FormatFileName)
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := CheckFormat(dir); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				<-done
				t.Fatal("CheckFormat still running after 10 s")
			}
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want+dir) || !strings.Contains(err.Error(), "kvidx-data 2") {
				t.Fatalf("CheckFormat: %v, want a refusal naming %s, saying %q and what to put there", err, p, tc.want+dir)
			}
		})
	}
}

// A FORMAT file grown large (here a sparse terabyte) is refused as not a
// FORMAT file, without being read whole into memory.
func TestFormatTooLarge(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, FormatFileName)
	if err := os.WriteFile(p, []byte("kvidx-data 2\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<40); err != nil {
		t.Fatal(err)
	}
	_, err := CheckFormat(dir)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "more than 256 bytes") {
		t.Fatalf("CheckFormat of a 1 TiB FORMAT: %v, want a format refusal saying it is too large", err)
	}
}

// A named pipe left at FORMAT's temporary name does not hold up the start
// that writes a new directory's FORMAT (the open for writing blocked until
// a reader came: kvidx serve hung in recovery).
func TestFormatTempNamedPipe(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, FormatFileName+".tmp"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := Open(context.Background(), dir, testOptions())
		if err == nil {
			err = s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		if f, err := os.OpenFile(filepath.Join(dir, FormatFileName+".tmp"), os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("Open of a new directory still running after 10 s")
	}
	if v, err := CheckFormat(dir); v != FormatVersion || err != nil {
		t.Fatalf("FORMAT after Open: version %d, %v", v, err)
	}
}
