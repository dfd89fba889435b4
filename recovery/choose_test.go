package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/snapshot"
)

// ChooseSnapshot is the one choice of a restart and of the dry run that
// predicts it: each rule of it, with the candidates tried through a fake.
func TestChooseSnapshot(t *testing.T) {
	type snap struct {
		name uint64 // the WAL index its file name says
		// meta, when not 0, writes a real snapshot whose meta says that
		// index (read by the rules for snapshots past the WAL's end);
		// junk writes a file that reads whole but is no snapshot.
		meta uint64
		junk bool
	}
	type result struct {
		meta uint64 // 0: the name's index
		err  error
	}
	corrupt := fmt.Errorf("unreadable: %w", snapshot.ErrCorrupt)
	gap := Span{From: 20, To: 29, Keep: 19, Desc: "entries 20..29 missing"}
	cases := []struct {
		name        string
		snaps       []snap // newest first
		first, last uint64
		gaps        []Span
		try         map[uint64]result
		cancelAt    uint64 // the try of this snapshot cancels ctx
		wantUsed    uint64 // 0: none
		wantTried   []uint64
		wantSkipped map[uint64]string // index: a part of the reason
		wantDamaged []uint64
		wantRefusal string // a part of it; "": none
		wantPastEnd bool
		wantErr     error
	}{
		{
			name:  "past end, misnamed: skipped as damaged, the next used",
			snaps: []snap{{name: 90, meta: 40}, {name: 40}}, first: 1, last: 50,
			wantUsed: 40, wantTried: []uint64{40},
			wantSkipped: map[uint64]string{90: "its meta says WAL index 40, its name 90"},
			wantDamaged: []uint64{90},
		},
		{
			name:  "past end, named for its index: refused",
			snaps: []snap{{name: 90, meta: 90}, {name: 40}}, first: 1, last: 50,
			wantRefusal: "is at WAL index 90 but the WAL ends at 50", wantPastEnd: true,
		},
		{
			name:  "past end, misnamed for an index past the end too: refused",
			snaps: []snap{{name: 90, meta: 70}, {name: 40}}, first: 1, last: 50,
			wantRefusal: "is misnamed", wantPastEnd: true,
		},
		{
			name:  "not reached: gaps after it",
			snaps: []snap{{name: 35}, {name: 10}}, first: 1, last: 50, gaps: []Span{gap},
			try:       map[uint64]result{35: {err: os.ErrPermission}},
			wantTried: []uint64{35}, wantRefusal: "no usable snapshot",
			wantSkipped: map[uint64]string{35: os.ErrPermission.Error(), 10: "not whole: entries 20..29 missing"},
		},
		{
			name:  "not reached: the WAL begins after it",
			snaps: []snap{{name: 10}}, first: 30, last: 50,
			wantRefusal: "no usable snapshot",
			wantSkipped: map[uint64]string{10: "the WAL does not reach back to it: entries 11..29 are needed"},
		},
		{
			name:  "damaged candidate skipped, the older used",
			snaps: []snap{{name: 40, junk: true}, {name: 30}, {name: 20}}, first: 1, last: 50,
			try:      map[uint64]result{40: {err: corrupt}},
			wantUsed: 30, wantTried: []uint64{40, 30},
			wantSkipped: map[uint64]string{40: corrupt.Error()}, wantDamaged: []uint64{40},
		},
		{
			name:  "unreadable, not damaged, candidate skipped and kept",
			snaps: []snap{{name: 40}, {name: 30}}, first: 1, last: 50,
			try:      map[uint64]result{40: {err: os.ErrPermission}},
			wantUsed: 30, wantTried: []uint64{40, 30},
			wantSkipped: map[uint64]string{40: os.ErrPermission.Error()},
		},
		{
			name:  "meta says another index: skipped as damaged",
			snaps: []snap{{name: 40}, {name: 30}}, first: 1, last: 50,
			try:      map[uint64]result{40: {meta: 45}},
			wantUsed: 30, wantTried: []uint64{40, 30},
			wantSkipped: map[uint64]string{40: "its meta says WAL index 45, its name 40"}, wantDamaged: []uint64{40},
		},
		{
			name:  "none usable, the WAL from 1: replay from 1",
			snaps: []snap{{name: 40}}, first: 1, last: 50,
			try:         map[uint64]result{40: {err: os.ErrPermission}},
			wantTried:   []uint64{40},
			wantSkipped: map[uint64]string{40: os.ErrPermission.Error()},
		},
		{
			name:  "no snapshot, the WAL from 1: replay from 1",
			first: 1, last: 50,
		},
		{
			name:  "none usable, the WAL from past 1: refused",
			snaps: []snap{{name: 40}}, first: 31, last: 50,
			try:       map[uint64]result{40: {err: os.ErrPermission}},
			wantTried: []uint64{40}, wantRefusal: "no usable snapshot, and the WAL does not begin at index 1 (entries 1..30 are gone)",
			wantSkipped: map[uint64]string{40: os.ErrPermission.Error()},
		},
		{
			name:  "ctx canceled during a try: its error, no more tried",
			snaps: []snap{{name: 40}, {name: 30}}, first: 1, last: 50,
			cancelAt: 40, wantTried: []uint64{40}, wantErr: context.Canceled,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			snapDir := filepath.Join(dir, SnapshotDirName)
			if err := os.MkdirAll(snapDir, 0o750); err != nil {
				t.Fatal(err)
			}
			var files []snapshot.File
			for _, s := range c.snaps {
				path := filepath.Join(snapDir, snapshot.FileName(s.name))
				switch {
				case s.meta != 0:
					writeMetaSnapshot(t, s.meta, path)
				case s.junk:
					if err := os.WriteFile(path, make([]byte, 4096), 0o640); err != nil {
						t.Fatal(err)
					}
				}
				files = append(files, snapshot.File{Path: path, Index: s.name})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var tried []uint64
			try := func(f snapshot.File) (snapshot.Meta, error) {
				tried = append(tried, f.Index)
				if f.Index == c.cancelAt {
					cancel()
					return snapshot.Meta{}, fmt.Errorf("loading %s: %w", f.Path, ctx.Err())
				}
				r := c.try[f.Index]
				if r.err != nil {
					return snapshot.Meta{}, r.err
				}
				return snapshot.Meta{Index: cmp.Or(r.meta, f.Index)}, nil
			}
			got, err := ChooseSnapshot(ctx, dir, files, c.first, c.last, c.gaps, try)
			if !errors.Is(err, c.wantErr) || (err != nil) != (c.wantErr != nil) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if !slices.Equal(tried, c.wantTried) {
				t.Errorf("tried %v, want %v", tried, c.wantTried)
			}
			if err != nil {
				return
			}
			if c.wantUsed == 0 {
				if got.Found {
					t.Errorf("used %s, want none", got.Used.Path)
				}
			} else if !got.Found || got.Used.Index != c.wantUsed || got.Meta.Index != c.wantUsed {
				t.Errorf("used %v (found %v, meta index %d), want %d", got.Used, got.Found, got.Meta.Index, c.wantUsed)
			}
			if len(got.Skipped) != len(c.wantSkipped) {
				t.Errorf("skipped %+v, want %v", got.Skipped, c.wantSkipped)
			}
			for _, sk := range got.Skipped {
				if want, ok := c.wantSkipped[sk.Index]; !ok || !strings.Contains(sk.Reason, want) {
					t.Errorf("skipped %d: %q, want %q in it", sk.Index, sk.Reason, want)
				}
			}
			var damaged []uint64
			for _, f := range got.Damaged {
				damaged = append(damaged, f.Index)
			}
			if !slices.Equal(damaged, c.wantDamaged) {
				t.Errorf("damaged %v, want %v", damaged, c.wantDamaged)
			}
			if (got.Refusal == "") != (c.wantRefusal == "") || !strings.Contains(got.Refusal, c.wantRefusal) {
				t.Errorf("refusal %q, want %q in it", got.Refusal, c.wantRefusal)
			}
			if got.PastEnd != c.wantPastEnd {
				t.Errorf("past end %v, want %v", got.PastEnd, c.wantPastEnd)
			}
		})
	}
}

// writeMetaSnapshot writes an empty index's snapshot whose meta says WAL
// index meta, under the name path.
func writeMetaSnapshot(t *testing.T, meta uint64, path string) {
	t.Helper()
	ix := engine.New()
	f := ix.Freeze()
	written, err := snapshot.Write(context.Background(), t.TempDir(), f, snapshot.Meta{Index: meta})
	f.Release(ix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(written, path); err != nil {
		t.Fatal(err)
	}
}
