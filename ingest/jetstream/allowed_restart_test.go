package jetstream

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/internal/natstest"
	"github.com/kvidx/kvidx/wal"
)

// A gap allowed at a replica's start (messages purged, or the stream
// recreated, while it was down) is recorded in its WAL, so that the replica
// restarted without --nats-allow-gap, from that WAL alone or from a snapshot
// taken after it, reports no gap again and applies each later message once
// (an audit's suspicion of a race around the restart, refuted).
func TestAllowedGapSurvivesRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recreate bool
		snapshot bool
	}{
		{"purged", false, false},
		{"purged/snapshot", false, true},
		{"recreated", true, false},
		{"recreated/snapshot", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.Start(t)
			dir := t.TempDir()
			publishCleared(t, url, 3) // 1..3, applied
			st := openStore(t, dir)
			runSource(t, New(Config{URL: url, Stream: testStream}, st), 3)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}

			// While the replica is down, messages it never applied go.
			if tc.recreate {
				deleteStream(t, url)
				publishCleared(t, url, 0) // a new, empty stream
			} else {
				publishCleared(t, url, 2) // 4, 5
				if err := testStreamOf(t, url).Purge(context.Background(), js.WithPurgeSequence(6)); err != nil {
					t.Fatal(err)
				}
			}
			st = openStore(t, dir)
			src := New(Config{URL: url, Stream: testStream, AllowGap: true}, st)
			stop := runInBackground(src)
			waitUntil(t, "the gap allowed", 10*time.Second, func() bool { s := src.Status(); return s.Connected && s.Gap == "" })
			stop()
			if tc.snapshot {
				if _, _, err := st.Snapshot(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}

			// Restarted without --nats-allow-gap: no gap, and the next
			// messages applied once each.
			st = openStore(t, dir)
			defer st.Close()
			src = New(Config{URL: url, Stream: testStream}, st)
			defer runInBackground(src)()
			publishCleared(t, url, 2)
			want := uint64(7)
			if tc.recreate {
				want = 2
			}
			waitUntil(t, "the new messages applied", 10*time.Second, func() bool { return src.Status().Applied == want })
			if s := src.Status(); s.Gap != "" {
				t.Fatalf("status %+v: the gap allowed before the restart is reported again", s)
			}
			events := 0
			if _, err := wal.Scan(filepath.Join(dir, "wal"), 0, 0, func(e wal.Entry) error {
				events += len(e.Events)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if events != 5 {
				t.Fatalf("the WAL holds %d events, want 5 (messages 1..3 and the two after the gap, once each)", events)
			}
		})
	}
}
