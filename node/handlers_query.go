package node

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/kvidx/kvidx/eventjson"
)

// match answers POST /v1/match.
func (s *Server) match(body []byte) reply {
	st, rep := s.readyStore()
	if rep != nil {
		return *rep
	}
	q, err := s.decodeQuery(body)
	if err != nil {
		return errorReply(http.StatusBadRequest, "decoding query: "+err.Error())
	}
	start := time.Now()
	scores := q.Match(st.Index())
	s.metrics.ObserveMatch(time.Since(start))
	out := eventjson.AppendResult(make([]byte, 0, 64+48*len(scores)), scores, len(q.LocalHashes))
	return reply{code: http.StatusOK, body: append(out, '\n')}
}

// decodeQuery decodes a query; a token query without "block_size" takes
// the server's default block size.
func (s *Server) decodeQuery(body []byte) (eventjson.Query, error) {
	return eventjson.DecodeQueryDefault(body, s.cfg.DefaultBlockSize)
}

// workerJSON is one row of GET /v1/workers.
type workerJSON struct {
	WorkerID uint64 `json:"worker_id"`
	DPRank   uint32 `json:"dp_rank"`
	Blocks   int    `json:"blocks"`
}

// handleWorkers serves GET /v1/workers, sorted by worker id then DP rank.
func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request) {
	st := s.storeOr503(w)
	if st == nil {
		return
	}
	ws := st.Index().Workers()
	out := make([]workerJSON, len(ws))
	for i, wb := range ws {
		out[i] = workerJSON{wb.Worker.WorkerID, wb.Worker.DPRank, wb.Blocks}
	}
	writeValue(w, http.StatusOK, out)
}

// handleStats serves GET /v1/stats: engine.Stats' keys plus WAL and
// snapshot bookkeeping.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	st := s.storeOr503(w)
	if st == nil {
		return
	}
	first, last, err := st.WALRange()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "reading the WAL's range: "+err.Error())
		return
	}
	applied, _ := st.Applied()
	snapIndex, snapAt := s.snaps.last()
	var snapTime *time.Time
	if !snapAt.IsZero() {
		t := snapAt.UTC()
		snapTime = &t
	}
	phase, _ := s.Status()
	stats := st.Index().Stats()
	var free, floor int64
	if g, ok := st.(spaceGuard); ok {
		if f, fl, checked := g.FreeSpace(); checked {
			free, floor = f, fl
		}
	}
	writeValue(w, http.StatusOK, statsJSON{
		Entries:           stats.Entries,
		HolderBlocks:      stats.HolderBlocks,
		WorkerKeys:        stats.WorkerKeys,
		Counters:          stats.Counters,
		WALFirstIndex:     first,
		WALLastIndex:      last,
		AppliedIndex:      applied,
		WALFenced:         phase == Fenced,
		IngestPaused:      lowSpace(st),
		DiskFreeBytes:     free,
		DiskFloorBytes:    floor,
		SnapshotLastIndex: snapIndex,
		SnapshotLastTime:  snapTime,
	})
}

// handleSnapshot serves POST /v1/snapshot: take one now.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	if s.storeOr503(w) == nil {
		return
	}
	path, index, err := s.snaps.take(context.WithoutCancel(r.Context()), "api")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "snapshot failed: "+err.Error())
		return
	}
	writeValue(w, http.StatusOK, struct {
		WALIndex uint64 `json:"wal_index"`
		File     string `json:"file"`
	}{index, path})
}

// handleHealthz serves GET /healthz: the process runs.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// handleReadyz serves GET /readyz: 200 when Ready, else 503 with the reason.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	status, reason := s.readiness(s.current())
	if status == Ready.String() {
		writeJSON(w, http.StatusOK, []byte(`{"status":"ready"}`+"\n"))
		return
	}
	writeValue(w, http.StatusServiceUnavailable, struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}{status, "not ready: " + reason})
}

// readiness returns what /readyz says of the server in state cur: its
// status ("ready", with no reason) or why it is not ready. A pause of
// appends for free space shows once Ready and while a prepare's appends
// are awaited (SetStorePreparing), which it holds up: "starting" then did
// not say why the start did not finish.
func (s *Server) readiness(cur *status) (status, reason string) {
	switch {
	case cur.phase == Ready:
		if why := s.sourcesNotReady(); why != "" {
			// Recovery is done: "starting" would mislead on a node whose
			// source dropped hours after it started.
			return "sources_not_ready", why
		}
	case !cur.preparing:
		return cur.phase.String(), cur.reason
	}
	if s.lowSpace() {
		// Ingest is refused, as when fenced, until space is back: the
		// index falls behind its workers meanwhile.
		var free, floor int64
		if g, ok := s.currentStore().(spaceGuard); ok {
			free, floor, _ = g.FreeSpace()
		}
		where := "below"
		if free >= floor {
			// A pause ends only with a WAL allowance free above the
			// floor (or a batch did not fit in what was left above).
			where = "too little above"
		}
		return "ingest_paused", fmt.Sprintf("ingest paused: %.1f MiB free on the WAL's filesystem, %s the %.1f MiB kept for the next snapshot and the WAL", float64(free)/(1<<20), where, float64(floor)/(1<<20))
	}
	return cur.phase.String(), cur.reason
}
