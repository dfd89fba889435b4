package smallfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
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
