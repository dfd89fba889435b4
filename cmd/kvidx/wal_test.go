package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

func TestWALRepair(t *testing.T) {
	data := t.TempDir()
	l, err := wal.Open(filepath.Join(data, "wal"), &wal.Options{Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		ev := engine.Event{Worker: engine.WorkerKey{WorkerID: 1}, Kind: engine.KindStored, Blocks: []engine.Block{{BlockHash: uint64(i + 1), TokensHash: 7}}}
		if _, err := l.Append(context.Background(), []engine.Event{ev}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no index", []string{"wal", "repair", data, "--yes"}, "--truncate-after INDEX is required"},
		{"no yes", []string{"wal", "repair", data, "--truncate-after", "3"}, "run again with --yes"},
		{"no dir", []string{"wal", "repair"}, "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runKvidx(t, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
	backup := filepath.Join(t.TempDir(), "backup")
	out, _, err := runKvidx(t, "", "wal", "repair", data, "--truncate-after", "3", "--yes", "--backup", backup)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "after entry 3") {
		t.Fatalf("output %q", out)
	}
	if entries, _ := os.ReadDir(backup); len(entries) == 0 {
		t.Fatal("nothing kept in the backup directory")
	}
	l, err = wal.Open(filepath.Join(data, "wal"), &wal.Options{Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if last, err := l.LastIndex(); err != nil || last != 3 {
		t.Fatalf("last index %d (%v) after the cut, want 3", last, err)
	}
}
