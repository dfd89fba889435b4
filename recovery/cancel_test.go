package recovery

import (
	"context"
	"errors"
	"fmt"
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

// A refusal of a damaged WAL cut short by the caller's context (kvidx
// serve's SIGINT while the snapshots past the damage are verified) is an
// interruption: the error wraps the context's, so that serve stops cleanly,
// not a refusal saying "(interrupted)" (found by review: Ctrl-C during such
// a startup printed the refusal and exited 1).
func TestDamageRefusalInterruptedIsAStopTable(t *testing.T) {
	tests := []struct {
		name string
		// refuse returns the error the data directory dir is refused
		// with under ctx.
		refuse func(ctx context.Context, dir string, opts Options) error
	}{
		{"open, damage in the last segment", func(ctx context.Context, dir string, opts Options) error {
			walDir := filepath.Join(dir, WALDirName)
			segs, err := wal.Segments(walDir)
			if err != nil || len(segs) != 1 {
				return fmt.Errorf("segments %v, %v; want one", segs, err)
			}
			flipMiddle(t, filepath.Join(walDir, segs[0].Name))
			_, err = Open(ctx, dir, opts)
			return err
		}},
		{"DamageErr, replay", func(ctx context.Context, dir string, _ Options) error {
			ee := &wal.EntryError{Dir: filepath.Join(dir, WALDirName), Segment: "00000000000000000001", Offset: 10, Entry: 30, Err: wal.ErrCorrupt}
			return DamageErr(ctx, dir, ee)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, canceled := range []bool{false, true} {
				dir := t.TempDir()
				opts := testOptions()
				opts.KeepSnapshots = 5
				writeHistory(t, dir, opts, 7, 60, 50)
				ctx, cancel := context.WithCancel(context.Background())
				if canceled {
					cancel()
				}
				err := tt.refuse(ctx, dir, opts)
				cancel()
				if err == nil {
					t.Fatalf("canceled %v: no error", canceled)
				}
				if errors.Is(err, context.Canceled) != canceled {
					t.Errorf("canceled %v: %v; errors.Is(err, context.Canceled) = %v", canceled, err, !canceled)
				}
				if canceled && strings.Contains(err.Error(), "was not verified") {
					t.Errorf("interrupted: %v; want no refusal text", err)
				}
				if !canceled && !strings.Contains(err.Error(), "--truncate-before 51") {
					t.Errorf("%v; want the refusal naming --truncate-before 51", err)
				}
			}
		})
	}
}
