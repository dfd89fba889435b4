package recovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/snapshot"
	"github.com/kvidx/kvidx/wal"
)

// DamageRefusal verifies the snapshots past the damage with the caller's
// context: once it is done (kvidx serve's SIGINT during a startup that
// refuses a large data directory), none is verified, and the refusal says
// so instead of judging them (found by review: it verified each whole with
// context.Background(), and the signal waited).
func TestDamageRefusalHonoursContextTable(t *testing.T) {
	tests := []struct {
		name     string
		damaged  bool // snapshot 50, past the damage, truncated
		canceled bool
		want     string
		not      []string
	}{
		{"good snapshot", false, false, "holds every entry up to 50, the damaged entry 30 included, and verifies", []string{"interrupted"}},
		{"good snapshot, canceled", false, true, "was not verified (interrupted)", []string{"and verifies", "context canceled"}},
		{"damaged snapshot", true, false, "no snapshot past it verifies", []string{"interrupted"}},
		{"damaged snapshot, canceled", true, true, "was not verified (interrupted)", []string{"no snapshot past it verifies", "context canceled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions()
			opts.SegmentSize = 2048
			opts.KeepSnapshots = 5
			writeHistory(t, dir, opts, 7, 60, 20, 50)
			if tt.damaged {
				if err := os.Truncate(filepath.Join(dir, SnapshotDirName, snapshot.FileName(50)), 8192); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.canceled {
				cancel()
			}
			ee := &wal.EntryError{Dir: filepath.Join(dir, WALDirName), Segment: "00000000000000000025", Offset: 10, Entry: 30, Err: wal.ErrCorrupt}
			msg := DamageRefusal(ctx, dir, ee)
			if !strings.Contains(msg, tt.want) {
				t.Errorf("refusal %q\nwant %q in it", msg, tt.want)
			}
			for _, n := range tt.not {
				if strings.Contains(msg, n) {
					t.Errorf("refusal %q\nwant no %q in it", msg, n)
				}
			}
		})
	}
}
