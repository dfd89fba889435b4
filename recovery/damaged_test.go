package recovery

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvidx/kvidx/snapshot"
)

// A snapshot is judged damaged only when the file reads through: bbolt
// reports a failed read of its pages (EIO) as it reports damage, and a
// sound snapshot on a device answering EIO was renamed *.damaged and the
// repair then cut the entries it alone held (found by review). A path that
// does not read (here a directory, as an unreadable file would) is not
// judged damaged, whatever the error says.
func TestSnapshotDamagedReadsTheFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "snapshot.bolt")
	if err := os.WriteFile(file, make([]byte, 64<<10), 0o640); err != nil {
		t.Fatal(err)
	}
	corrupt := fmt.Errorf("unreadable (bbolt panicked): %w", snapshot.ErrCorrupt)
	incompatible := fmt.Errorf("unknown format version 3: %w: %w", snapshot.ErrIncompatible, snapshot.ErrCorrupt)
	cases := []struct {
		name, path string
		err        error
		want       bool
	}{
		{"corrupt, reads", file, corrupt, true},
		{"corrupt, does not read", dir, corrupt, false},
		{"corrupt, gone", filepath.Join(dir, "gone.bolt"), corrupt, false},
		{"another build's format", file, incompatible, false},
		{"an OS error", file, os.ErrPermission, false},
	}
	for _, c := range cases {
		if got := SnapshotDamaged(c.path, c.err); got != c.want {
			t.Errorf("%s: SnapshotDamaged %v, want %v", c.name, got, c.want)
		}
	}
}
