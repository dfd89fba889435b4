package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/wal"
)

// handleEvents serves POST /v1/events: decode the whole body (NDJSON or a
// JSON array), append it as one batch, answer once durable and applied.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	st := s.writableStore(w)
	if st == nil {
		return
	}
	buf, ok := s.readBody(w, r)
	if !ok {
		return
	}
	events, err := eventjson.DecodeBatch(buf.Bytes())
	s.putBuf(buf) // events do not reference the body
	if err != nil {
		if errors.Is(err, eventjson.ErrNoEvents) {
			writeError(w, http.StatusBadRequest, "request body holds no events")
			return
		}
		writeError(w, http.StatusBadRequest, "decoding events: "+err.Error())
		return
	}
	index, results, ok := s.appendEvents(r.Context(), w, st, events)
	if !ok {
		return
	}
	body := make([]byte, 0, 64)
	body = append(body, `{"accepted":`...)
	accepted := len(events)
	rejected := make([]byte, 0, 32)
	for i, err := range results {
		if err == nil {
			continue
		}
		accepted--
		reason := engine.RejectReason(err)
		if reason == "" {
			reason = err.Error()
		}
		if len(rejected) > 0 {
			rejected = append(rejected, ',')
		}
		rejected = append(rejected, `{"index":`...)
		rejected = strconv.AppendInt(rejected, int64(i), 10)
		rejected = append(rejected, `,"reason":`...)
		q, _ := json.Marshal(reason)
		rejected = append(rejected, q...)
		rejected = append(rejected, '}')
	}
	body = strconv.AppendInt(body, int64(accepted), 10)
	body = append(body, `,"wal_index":`...)
	body = strconv.AppendUint(body, index, 10)
	body = append(body, `,"rejected":[`...)
	body = append(body, rejected...)
	body = append(body, "]}\n"...)
	writeJSON(w, http.StatusOK, body)
}

// writableStore returns the store when ingest is allowed, or answers 503.
func (s *Server) writableStore(w http.ResponseWriter) Store {
	switch phase, reason := s.Status(); phase {
	case Ready:
		return s.currentStore()
	case Fenced:
		writeError(w, http.StatusServiceUnavailable, "ingest refused: the WAL is fenced until restart: "+reason)
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "not ready: "+reason)
	}
	return nil
}

// appendEvents appends events as one batch, answering the failure itself
// (ok false): 503 with Retry-After on overload, 503 and fencing when the WAL
// is fenced, 500 otherwise.
func (s *Server) appendEvents(ctx context.Context, w http.ResponseWriter, st Store, events []engine.Event) (index uint64, results []error, ok bool) {
	index, results, err := st.Append(ctx, events, nil)
	switch {
	case err == nil:
		if results != nil && len(results) != len(events) {
			s.log.Error("store returned a result count unlike its event count", "events", len(events), "results", len(results))
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("store returned %d results for %d events", len(results), len(events)))
			return 0, nil, false
		}
		s.snaps.appended(len(events))
		if results == nil {
			results = make([]error, len(events))
		}
		return index, results, true
	case errors.Is(err, wal.ErrOverloaded):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "overloaded, retry later: "+err.Error())
	case errors.Is(err, wal.ErrFenced):
		s.SetFenced(err)
		writeError(w, http.StatusServiceUnavailable, "ingest refused: the WAL is fenced until restart: "+err.Error())
	case ctx.Err() != nil:
		// The client is gone; whether the batch was logged is unknown to it.
		s.log.Debug("append abandoned by the client", "events", len(events), "err", err)
		writeError(w, http.StatusServiceUnavailable, "request cancelled: "+err.Error())
	default:
		s.log.Error("append failed", "events", len(events), "err", err)
		writeError(w, http.StatusInternalServerError, "append failed: "+err.Error())
	}
	return 0, nil, false
}

// handleDeleteWorker serves DELETE /v1/workers/{worker_id}: log and apply a
// worker_removed event for a worker id the index knows.
func (s *Server) handleDeleteWorker(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("worker_id")
	id, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("worker id %q: want an unsigned 64-bit integer", raw))
		return
	}
	st := s.writableStore(w)
	if st == nil {
		return
	}
	known, blocks := false, 0
	for _, wb := range st.Index().Workers() {
		if wb.Worker.WorkerID == id {
			known = true
			blocks += wb.Blocks
		}
	}
	if !known {
		writeError(w, http.StatusNotFound, fmt.Sprintf("worker %d holds no blocks", id))
		return
	}
	ev := []engine.Event{{Worker: engine.WorkerKey{WorkerID: id}, Kind: engine.KindWorkerRemoved}}
	index, results, ok := s.appendEvents(r.Context(), w, st, ev)
	if !ok {
		return
	}
	if results[0] != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("removing worker %d: %v", id, results[0]))
		return
	}
	writeValue(w, http.StatusOK, struct {
		WorkerID uint64 `json:"worker_id"`
		Blocks   int    `json:"blocks"`
		WALIndex uint64 `json:"wal_index"`
	}{id, blocks, index})
}
