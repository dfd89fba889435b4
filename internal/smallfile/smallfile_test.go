package smallfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		size    int64 // -1: no file
		want    int
		wantErr error
	}{
		{"empty", 0, 0, nil},
		{"at the bound", 64, 64, nil},
		{"one past", 65, 0, ErrTooLarge},
		// A sparse file of a terabyte: refused without reading it.
		{"sparse terabyte", 1 << 40, 0, ErrTooLarge},
		{"missing", -1, 0, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			if tt.size >= 0 {
				if err := os.WriteFile(path, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(path, tt.size); err != nil {
					t.Fatal(err)
				}
			}
			b, err := Read(path, 64)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Read: %v, want %v", err, tt.wantErr)
			}
			if len(b) != tt.want {
				t.Fatalf("Read: %d bytes, want %d", len(b), tt.want)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name    string
		before  func(t *testing.T, path string) // what the names hold first
		wantErr bool
	}{
		{"fresh", func(*testing.T, string) {}, false},
		{"over the file", func(t *testing.T, path string) { writeFile(t, path, "old and longer\n") }, false},
		{"a temporary file left", func(t *testing.T, path string) { writeFile(t, path+".tmp", "partial") }, false},
		// A named pipe at the temporary name blocked the open for good.
		{"a named pipe at the temporary name", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path+".tmp", 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		// A link to one failed instead.
		{"a link to a named pipe at the temporary name", func(t *testing.T, path string) {
			fifo := filepath.Join(filepath.Dir(path), "fifo")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(fifo, path+".tmp"); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a directory with files at the temporary name", func(t *testing.T, path string) {
			if err := os.Mkdir(path+".tmp", 0o750); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(path+".tmp", "x"), "x")
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "MARK")
			tt.before(t, path)
			done := make(chan error, 1)
			go func() { done <- Write(path, []byte("7\n"), true) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Write still running after 10 s")
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("Write: %v, want an error: %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != "7\n" {
				t.Fatalf("after Write: %q, %v", b, err)
			}
			if _, err := os.Lstat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("temporary file left: %v", err)
			}
		})
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o640); err != nil {
		t.Fatal(err)
	}
}
