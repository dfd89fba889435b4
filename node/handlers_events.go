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
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

// ingest answers POST /v1/events: decode the whole body (NDJSON or a JSON
// array), append it as one batch, answer once durable and applied. The
// events do not reference body.
func (s *Server) ingest(body []byte) reply {
	st, rep := s.writableStore()
	if rep != nil {
		return *rep
	}
	events, err := eventjson.DecodeBatch(body)
	if err != nil {
		if errors.Is(err, eventjson.ErrNoEvents) {
			return errorReply(http.StatusBadRequest, "request body holds no events")
		}
		return errorReply(http.StatusBadRequest, "decoding events: "+err.Error())
	}
	index, results, rep := s.appendEvents(st, events)
	if rep != nil {
		return *rep
	}
	out := make([]byte, 0, 64)
	out = append(out, `{"accepted":`...)
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
	out = strconv.AppendInt(out, int64(accepted), 10)
	out = append(out, `,"wal_index":`...)
	out = strconv.AppendUint(out, index, 10)
	out = append(out, `,"rejected":[`...)
	out = append(out, rejected...)
	out = append(out, "]}\n"...)
	return reply{code: http.StatusOK, body: out}
}

// writableStore returns the store when ingest is allowed, or the 503 to
// answer.
func (s *Server) writableStore() (Store, *reply) {
	var r reply
	switch cur := s.current(); cur.phase {
	case Ready:
		return s.currentStore(), nil
	case Fenced:
		r = errorReply(http.StatusServiceUnavailable, "ingest refused: the WAL is fenced until restart: "+cur.reason)
	default:
		// Why, as /readyz says it (a pause for free space holding up a
		// prepare's appends, rather than what the prepare does).
		_, why := s.readiness(cur)
		r = retryReply("not ready: " + why)
	}
	return nil, &r
}

// appendEvents appends events as one batch, or returns the failure to
// answer: 503 with Retry-After on overload and while appends pause for
// lack of free space (a snapshot is then asked for), 503 and fencing when the WAL is
// fenced, 500 otherwise. Nothing cancels the wait: a batch in flight
// finishes and is answered even when its client goes away or the server is
// shutting down (fasthttp ends a request's context then).
func (s *Server) appendEvents(st Store, events []engine.Event) (index uint64, results []error, _ *reply) {
	fail := func(r reply) (uint64, []error, *reply) { return 0, nil, &r }
	// Counted before the check: a shutdown that ends its drain sets
	// draining, then reads the count, so it either waits for this batch
	// or this batch is refused (a batch decoded while the drain timed out
	// reached the store after Run had called the shutdown clean).
	s.appending.Add(1)
	defer s.appending.Add(-1)
	if s.draining.Load() {
		return fail(retryReply("shutting down"))
	}
	index, results, err := st.Append(context.Background(), events, nil)
	switch {
	case err == nil:
		if results != nil && len(results) != len(events) {
			s.log.Error("store returned a result count unlike its event count", "events", len(events), "results", len(results))
			return fail(errorReply(http.StatusInternalServerError, fmt.Sprintf("store returned %d results for %d events", len(results), len(events))))
		}
		s.snaps.appended(len(events))
		if results == nil {
			results = make([]error, len(events))
		}
		return index, results, nil
	case errors.Is(err, recovery.ErrLowSpace):
		s.snaps.poke()
		return fail(retryReply("ingest paused, retry later: " + err.Error()))
	case errors.Is(err, wal.ErrOverloaded):
		return fail(retryReply("overloaded, retry later: " + err.Error()))
	case errors.Is(err, wal.ErrFenced):
		// The batch that met the write or fsync error may be in the log
		// or not (after a failed fsync the file's state is unknown): it is
		// not acknowledged, but "refused" would promise it is gone.
		s.SetFenced(err)
		return fail(errorReply(http.StatusServiceUnavailable, "not acknowledged: the WAL failed with this batch in flight, which a restart may or may not find in the log; ingest is refused until restart: "+err.Error()))
	default:
		s.log.Error("append failed", "events", len(events), "err", err)
		return fail(errorReply(http.StatusInternalServerError, "append failed: "+err.Error()))
	}
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
	st, rep := s.writableStore()
	if rep != nil {
		rep.write(w)
		return
	}
	// The check and the append are one step for deletes: concurrent
	// deletes of one worker all passed the check, each answered 200 with
	// its blocks and each logged a WorkerRemoved (found by review). The
	// append returns once the event is applied, so the next delete sees
	// the worker gone.
	s.deleteMu.Lock()
	defer s.deleteMu.Unlock()
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
	index, results, rep := s.appendEvents(st, ev)
	if rep != nil {
		rep.write(w)
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
