package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// snapshotter takes snapshots for the API, the periodic loop and shutdown,
// one at a time, and remembers the last one.
type snapshotter struct {
	s       *Server
	run     sync.Mutex    // held while a snapshot is taken
	pending atomic.Uint64 // events appended since the last snapshot began
	trigger chan struct{} // poked when pending reaches SnapshotEveryEvents

	mu        sync.Mutex
	lastIndex uint64
	lastAt    time.Time // zero: never
	since     time.Time // the interval counts from here: last success or start
}

func newSnapshotter(s *Server) *snapshotter {
	return &snapshotter{s: s, trigger: make(chan struct{}, 1), since: time.Now()}
}

// appended counts n events appended and pokes the loop when a snapshot is due.
func (sn *snapshotter) appended(n int) {
	every := sn.s.cfg.SnapshotEveryEvents
	if every > 0 && sn.pending.Add(uint64(n)) >= every {
		sn.poke()
	}
}

// poke wakes the loop to check whether a snapshot is due.
func (sn *snapshotter) poke() {
	select {
	case sn.trigger <- struct{}{}:
	default:
	}
}

func (sn *snapshotter) setLast(index uint64, at time.Time) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.lastIndex, sn.lastAt = index, at
	if at.After(sn.since) {
		sn.since = at
	}
}

func (sn *snapshotter) last() (uint64, time.Time) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.lastIndex, sn.lastAt
}

// changed tells whether the store applied entries after the last snapshot.
func (sn *snapshotter) changed() bool {
	st := sn.s.currentStore()
	if st == nil {
		return false
	}
	applied, _ := st.Applied()
	last, _ := sn.last()
	return applied > last
}

// due tells why the periodic loop should take a snapshot now (the trigger
// its log lines name), or "" when it should not.
func (sn *snapshotter) due(now time.Time) (why string) {
	if !sn.changed() {
		return ""
	}
	cfg := &sn.s.cfg
	if cfg.SnapshotEveryEvents > 0 && sn.pending.Load() >= cfg.SnapshotEveryEvents {
		return "events"
	}
	// Appends pause while the disk is nearly full: a snapshot lets the WAL
	// be truncated and the oldest snapshot go, which may end the pause.
	if sn.s.lowSpace() {
		return "free space low"
	}
	sn.mu.Lock()
	since := sn.since
	sn.mu.Unlock()
	if cfg.SnapshotInterval > 0 && now.Sub(since) >= cfg.SnapshotInterval {
		return "periodic"
	}
	return ""
}

// take takes a snapshot now, recording its outcome in the metrics and logs.
func (sn *snapshotter) take(ctx context.Context, why string) (path string, index uint64, err error) {
	st := sn.s.currentStore()
	if st == nil {
		return "", 0, fmt.Errorf("snapshot (%s): no store yet", why)
	}
	sn.run.Lock()
	defer sn.run.Unlock()
	n := sn.pending.Load()
	start := time.Now()
	path, index, err = st.Snapshot(ctx)
	d := time.Since(start)
	if err != nil && path != "" {
		// Published: the index is covered up to index, and the next
		// snapshot retries the pruning or truncation that failed.
		sn.s.metrics.SnapshotFailed()
		sn.s.log.Error("snapshot published, but keeping the newest snapshots or truncating the WAL after it failed", "trigger", why, "path", path, "index", index, "err", err)
		err = nil
	}
	if err != nil {
		// One cut short by its context (a shutdown) did not fail.
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			sn.s.log.Info("snapshot abandoned", "trigger", why, "duration", d, "err", err)
			return "", 0, fmt.Errorf("snapshot (%s): %w", why, err)
		}
		sn.s.metrics.SnapshotFailed()
		sn.s.log.Error("snapshot failed", "trigger", why, "duration", d, "err", err)
		return "", 0, fmt.Errorf("snapshot (%s): %w", why, err)
	}
	sn.pending.Add(-n)
	now := time.Now()
	sn.setLast(index, now)
	sn.s.metrics.ObserveSnapshot(d, index, now)
	sn.s.log.Info("snapshot published", "trigger", why, "path", path, "index", index, "duration", d)
	return path, index, nil
}

// lowSpacePoll is how often the loop looks for a pause for free space that
// no refused append reported (see loop): a statfs at most.
const lowSpacePoll = time.Second

// loop takes periodic snapshots until ctx is cancelled: when
// SnapshotEveryEvents events were appended since the last one, or
// SnapshotInterval passed since it, provided the index changed. A failure
// is logged and counted and retried after SnapshotRetry.
func (sn *snapshotter) loop(ctx context.Context) {
	cfg := &sn.s.cfg
	var tickC <-chan time.Time
	if cfg.SnapshotInterval > 0 {
		t := time.NewTicker(max(cfg.SnapshotInterval/10, 10*time.Millisecond))
		defer t.Stop()
		tickC = t.C
	}
	// A refused append pokes the loop when appends pause, but a pause may
	// come with none: the disk filled while the node was idle, or it
	// started on a nearly full disk, and /readyz then turns clients away.
	// The snapshot that may end it must not wait for one (found on a small
	// tmpfs: with --snapshot-interval 0 none was ever taken).
	lowC := time.NewTicker(lowSpacePoll)
	defer lowC.Stop()
	var notBefore time.Time
	var retryC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-sn.trigger:
		case <-tickC:
		case <-lowC.C:
			if !sn.s.lowSpace() {
				continue
			}
		case <-retryC:
			retryC = nil
		}
		now := time.Now()
		if now.Before(notBefore) {
			continue
		}
		why := sn.due(now)
		if why == "" {
			continue
		}
		if _, _, err := sn.take(ctx, why); err != nil {
			if ctx.Err() != nil {
				return
			}
			notBefore = time.Now().Add(cfg.SnapshotRetry)
			retryC = time.After(cfg.SnapshotRetry)
		}
	}
}
