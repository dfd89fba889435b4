package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Phase is the server's readiness state: Starting -> Ready -> Fenced.
type Phase int

// The phases.
const (
	// Starting: no store yet (recovery is running), when only /healthz,
	// /readyz and /metrics answer 200; or a store being prepared (see
	// SetStorePreparing), when queries are answered too, but not ingest.
	Starting Phase = iota
	// Ready: the store is serving ingest and queries.
	Ready
	// Fenced: the WAL failed a write or fsync; ingest answers 503 until
	// restart, queries keep working.
	Fenced
)

func (p Phase) String() string {
	switch p {
	case Starting:
		return "starting"
	case Ready:
		return "ready"
	case Fenced:
		return "fenced"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

type status struct {
	phase  Phase
	reason string
	// preparing: Starting while SetStorePreparing's prepare runs (the
	// store is set, its appends awaited), when a pause of appends for
	// free space is what holds the start up (see readiness).
	preparing bool
}

// Server is kvidx's HTTP API over a [Store]. Create it with [New] before
// recovery starts (so /healthz answers and the WAL can be instrumented), hand
// it the store with [Server.SetStore], and serve with [Server.Run] or mount
// it ([Server] is an http.Handler).
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	mux     *http.ServeMux
	state   atomic.Pointer[status]
	store   atomic.Pointer[storeBox]
	snaps   *snapshotter
	bufs    sync.Pool // *bytes.Buffer for request bodies
	sources sources
	// draining is set when Run stops serving: requests still arriving on
	// kept-alive connections get a 503 and the connection is closed.
	draining atomic.Bool
	// appending counts batches in the store's Append: what a shutdown's
	// drain must wait for, since their clients may be acknowledged.
	appending atomic.Int64
	// deleteMu makes a DELETE /v1/workers/{id}'s check that the worker is
	// known and its append one step.
	deleteMu sync.Mutex
	// eventBytes is the body bytes of the event posts being read, decoded
	// and appended (see admitEvents).
	eventBytes atomic.Int64
}

// maxPooledBuffer keeps huge request buffers out of the pool.
const maxPooledBuffer = 4 << 20

// New returns a server in the Starting phase ("recovering").
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: NewMetrics()}
	s.metrics.reg.MustRegister(sourceCollector{&s.sources})
	s.sources.ctx, s.sources.cancel = context.WithCancel(context.Background())
	s.state.Store(&status{phase: Starting, reason: "recovering"})
	s.snaps = newSnapshotter(s)
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	handle := func(pattern, name string, h http.HandlerFunc) {
		s.mux.Handle(pattern, s.instrument(name, h))
	}
	handle("POST /v1/events", "events", s.admitted(s.bodyHandler(s.ingest)))
	handle("POST /v1/match", "match", s.bodyHandler(s.match))
	handle("GET /v1/workers", "workers", s.handleWorkers)
	handle("DELETE /v1/workers/{worker_id}", "delete_worker", s.handleDeleteWorker)
	handle("GET /v1/stats", "stats", s.handleStats)
	handle("POST /v1/snapshot", "snapshot", s.handleSnapshot)
	handle("GET /healthz", "healthz", s.handleHealthz)
	handle("GET /readyz", "readyz", s.handleReadyz)
	s.mux.Handle("GET /metrics", s.instrument("metrics", s.metrics.Handler()))
}

// Metrics returns the server's metrics, e.g. for [NewWALInstrument] or the
// recovery figures.
func (s *Server) Metrics() *Metrics { return s.metrics }

// SetStore hands the server its store and makes it Ready (unless it is
// already fenced).
func (s *Server) SetStore(st Store) {
	s.setStore(st)
	s.setReady()
}

// SetStorePreparing hands the server its store as SetStore does, but keeps
// it Starting, with reason, while prepare runs on a loop of its own (see
// GoSource): queries are answered, and a shutdown takes its final snapshot,
// but event posts and deletes get 503 with Retry-After and /readyz is not
// ready, with reason (while the store pauses appends for free space, which
// holds up prepare's, they say that pause instead, as once Ready). Once
// prepare returns nil the server is Ready (unless fenced meanwhile) and
// then runs, on that loop (it may start sources with GoSource). prepare is for appends that must land before any event is
// applied, as a start's clears of what event sources fed worker ids they
// feed no more: an event posted before such a clear, for such a worker id,
// would be acknowledged and then cleared with it. A prepare that fails
// leaves the server Starting, and then does not run: when the shutdown
// ended its context, silently; otherwise the error is logged and /readyz
// and the refused posts say it, until a restart (ingest before the appends
// landed would not be safe, and GoSource drops a loop's error).
// Call it instead of SetStore.
func (s *Server) SetStorePreparing(st Store, reason string, prepare func(ctx context.Context) error, then func()) {
	s.setStarting(reason, true)
	s.setStore(st)
	s.GoSource(func(ctx context.Context) error {
		if err := prepare(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Error("preparing the store failed: ingest stays refused until restart", "step", reason, "err", err)
				s.SetStarting(fmt.Sprintf("%s failed (restart to retry): %v", reason, err))
			}
			return err
		}
		s.setReady()
		if then != nil {
			then()
		}
		return nil
	})
}

// setStore hands the server its store, leaving its phase as it is.
func (s *Server) setStore(st Store) {
	s.store.Store(&storeBox{st})
	s.metrics.setStore(st)
	if r, ok := st.(recoveryReporter); ok {
		// The events replayed after the snapshot are in the WAL past it
		// as much as those appended from now on: they count towards
		// SnapshotEveryEvents, so that the next restart replays no more
		// than that.
		s.snaps.appended(int(r.Report().ReplayedEvents))
	}
}

// setReady makes the server Ready, unless it is fenced.
func (s *Server) setReady() {
	for {
		cur := s.state.Load()
		if cur.phase == Fenced || s.state.CompareAndSwap(cur, &status{phase: Ready}) {
			return
		}
	}
}

// SetStarting keeps the server in the Starting phase with a new reason
// (e.g. "recovering: replaying the WAL"). It does nothing once the server
// is Ready or Fenced.
func (s *Server) SetStarting(reason string) { s.setStarting(reason, false) }

// setStarting is SetStarting, preparing telling whether a prepare's
// appends are awaited (see status).
func (s *Server) setStarting(reason string, preparing bool) {
	for {
		cur := s.state.Load()
		if cur.phase != Starting || s.state.CompareAndSwap(cur, &status{phase: Starting, reason: reason, preparing: preparing}) {
			return
		}
	}
}

// SetFenced fences the server: ingest answers 503 with cause until restart.
func (s *Server) SetFenced(cause error) {
	reason := "wal fenced"
	if cause != nil {
		reason = cause.Error()
	}
	for {
		cur := s.state.Load()
		if cur.phase == Fenced {
			return
		}
		if s.state.CompareAndSwap(cur, &status{phase: Fenced, reason: reason}) {
			s.log.Error("ingest fenced: the WAL failed; restart to resume", "cause", reason)
			return
		}
	}
}

// Status returns the server's phase and, unless Ready, why.
func (s *Server) Status() (Phase, string) {
	cur := s.current()
	return cur.phase, cur.reason
}

// current returns the server's state, fenced first when Ready and the
// WAL reports it fenced.
func (s *Server) current() *status {
	cur := s.state.Load()
	if cur.phase == Ready {
		if st := s.currentStore(); st != nil && st.WALStats().Fenced {
			s.SetFenced(errors.New("wal fenced after a write or fsync failure"))
			cur = s.state.Load()
		}
	}
	return cur
}

// SetLastSnapshot records the snapshot the store was recovered from, so
// that /v1/stats, the metrics and the periodic loop ("nothing changed since")
// start from it.
func (s *Server) SetLastSnapshot(index uint64, at time.Time) {
	s.snaps.setLast(index, at)
	s.metrics.SetLastSnapshot(index, at)
}

func (s *Server) currentStore() Store {
	if b := s.store.Load(); b != nil {
		return b.s
	}
	return nil
}

// ServeHTTP serves the API. Unknown paths get a JSON 404, a known path with
// the wrong method a JSON 405 with an Allow header.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		// The mux would redirect ("//v1/match", "/v1/../v1/stats", "*"
		// of OPTIONS *) with an HTML body; the API has no such paths.
		s.countRequest("other", http.StatusNotFound)
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such path: %s", p))
		return
	}
	if h, pattern := s.mux.Handler(r); pattern == "" {
		s.fallback(w, r, h)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// fallback runs the mux's own 404/405/redirect handler into a recorder and
// answers with its status and headers but a JSON body.
func (s *Server) fallback(w http.ResponseWriter, r *http.Request, h http.Handler) {
	rec := &headerRecorder{header: http.Header{}, code: http.StatusOK}
	h.ServeHTTP(rec, r)
	for _, k := range []string{"Allow", "Location"} {
		if v := rec.header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	msg := http.StatusText(rec.code)
	switch rec.code {
	case http.StatusNotFound:
		msg = fmt.Sprintf("no such path: %s", r.URL.Path)
	case http.StatusMethodNotAllowed:
		msg = fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, rec.header.Get("Allow"))
	}
	s.countRequest("other", rec.code)
	writeError(w, rec.code, msg)
}

type headerRecorder struct {
	header http.Header
	code   int
}

func (h *headerRecorder) Header() http.Header         { return h.header }
func (h *headerRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (h *headerRecorder) WriteHeader(code int)        { h.code = code }

// instrument counts a route's requests by status code.
func (s *Server) instrument(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		s.countRequest(name, sw.code)
	})
}

// countRequest counts one answered request of a route.
func (s *Server) countRequest(route string, code int) {
	s.metrics.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeJSON answers code with a JSON body already encoded.
func writeJSON(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writeValue answers code with v encoded by encoding/json.
func writeValue(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		return
	}
	writeJSON(w, code, append(body, '\n'))
}

// writeError answers code with {"error":msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	errorReply(code, msg).write(w)
}

// reply is an API answer computed apart from the front-end that sends it:
// net/http ([Server.ServeHTTP]) or fasthttp (the hot routes in [Server.Run]).
type reply struct {
	code       int
	body       []byte // JSON, newline-terminated
	retryAfter bool   // send "Retry-After: 1"
	identity   bool   // send "Accept-Encoding: identity"
}

// errorReply is code with {"error":msg}.
func errorReply(code int, msg string) reply {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	return reply{code: code, body: append(body, '\n')}
}

// retryReply is a 503 the client should retry after a second.
func retryReply(msg string) reply {
	r := errorReply(http.StatusServiceUnavailable, msg)
	r.retryAfter = true
	return r
}

func (r reply) write(w http.ResponseWriter) {
	if r.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	if r.identity {
		w.Header().Set("Accept-Encoding", "identity")
	}
	writeJSON(w, r.code, r.body)
}

// readyStore returns the store, or the 503 to answer when there is none yet.
func (s *Server) readyStore() (Store, *reply) {
	if st := s.currentStore(); st != nil {
		return st, nil
	}
	_, reason := s.Status()
	r := retryReply("not ready: " + reason)
	return nil, &r
}

// storeOr503 returns the store, or answers 503 when there is none yet.
func (s *Server) storeOr503(w http.ResponseWriter) Store {
	st, r := s.readyStore()
	if r != nil {
		r.write(w)
	}
	return st
}

// tooLarge is the 413 for a body over the limit; length is its declared
// length, or -1 when unknown (chunked).
func tooLarge(length, limit int64) reply {
	if length >= 0 {
		return errorReply(http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body of %d bytes exceeds the limit of %d bytes", length, limit))
	}
	return errorReply(http.StatusRequestEntityTooLarge,
		fmt.Sprintf("request body exceeds the limit of %d bytes", limit))
}

// admitEvents admits an event post of declared body length (-1: unknown,
// chunked) while the event posts in flight hold at most
// Config.MaxEventBytesInFlight bytes of bodies; one post is always
// admitted. Each post holds a few times its body's size in memory while it
// is decoded and waits for its WAL commit, and the commit queue bounds
// posts by count, not size: without this, posts of the largest body could
// take all of a machine's memory before any was refused. A post is charged
// what it may hold before more of its body arrives (see eventAdmission);
// release returns the bytes; a refused post gets a 503 with Retry-After.
func (s *Server) admitEvents(declared int64) (a *eventAdmission, rep reply, ok bool) {
	if rep, ok := s.wouldAdmitEvents(declared); !ok {
		return nil, rep, false
	}
	a = &eventAdmission{s: s, declared: declared, most: s.eventCharge(declared)}
	if rep, ok := a.cover(0); !ok {
		return nil, rep, false
	}
	return a, reply{}, true
}

// eventAdmission is an admitted event post's share of the bytes in
// flight. It is charged ahead of the body by a step of maxReservedBody,
// never past what the post may reach (most): a client that declares a
// large body and stalls holds no more of the budget than of memory (found
// by an audit: sixteen posts declaring 16 MiB each and stalling after
// 20 KB held the whole 256 MiB until the read timeout, and every other
// event post got a 503).
type eventAdmission struct {
	s        *Server
	declared int64 // -1: unknown
	most     int64 // eventCharge(declared)
	held     int64
}

// cover charges a for the step of its body after the first n bytes,
// unless posts in flight would then hold more than the limit (a post
// alone gets in whatever it holds). A post charged nothing (its body is
// refused by size, or empty) gets in even while a post alone holds more
// than the limit (found by review: a body over MaxBodyBytes was told to
// retry, a 503, then). A refused charge takes nothing, not even for an
// instant: a post alone past the limit, charged its next step in that
// instant, was refused part way (found by review).
func (a *eventAdmission) cover(n int64) (reply, bool) {
	want := min(a.most, (n/maxReservedBody+1)*maxReservedBody)
	if want <= a.held {
		return reply{}, true
	}
	for {
		cur := a.s.eventBytes.Load()
		others := cur - a.held
		if others > 0 && others+want > a.s.cfg.MaxEventBytesInFlight {
			return a.s.overloadedEvents(others, a.declared, want, n > 0), false
		}
		if a.s.eventBytes.CompareAndSwap(cur, others+want) {
			a.held = want
			return reply{}, true
		}
	}
}

// release returns what a holds.
func (a *eventAdmission) release() {
	a.s.eventBytes.Add(-a.held)
	a.held = 0
}

// eventCharge is the most a post of declared body length (-1: unknown) is
// charged: its length, or the most a body may reach when unknown, and
// nothing for a body declared over MaxBodyBytes, refused by its size (a
// 413) when read: an overloaded server must not tell the client to retry
// what never fits.
func (s *Server) eventCharge(declared int64) int64 {
	switch {
	case declared > s.cfg.MaxBodyBytes:
		return 0
	case declared >= 0:
		return declared
	}
	return s.cfg.MaxBodyBytes
}

// overloadedEvents is the 503 for a post of declared body length (-1:
// unknown) that would hold charge bytes while posts of inFlight bytes are
// in flight (partWay: some of its body came): naming only the bytes in
// flight, under the limit, read as if the server refused posts below it;
// and a post charged ahead of its body is told so (found by review: a
// small chunked post was told its bytes were MaxBodyBytes, and one refused
// part way that its charge, what came and what was ahead, was all ahead).
func (s *Server) overloadedEvents(inFlight, declared, charge int64, partWay bool) reply {
	this := fmt.Sprintf("this one's %d bytes", declared)
	switch {
	case declared < 0 && partWay:
		this = fmt.Sprintf("this one, of unknown length (chunked), counted %d bytes for what of its body came and what comes next,", charge)
	case declared < 0:
		this = fmt.Sprintf("this one, of unknown length (chunked), counted %d bytes ahead of its body,", charge)
	case charge < declared:
		this = fmt.Sprintf("this one's first %d of %d bytes", charge, declared)
	}
	return retryReply(fmt.Sprintf("overloaded, retry later: event posts of %d bytes in all are in flight, and %s would pass the limit of %d",
		inFlight, this, s.cfg.MaxEventBytesInFlight))
}

// wouldAdmitEvents tells, without admitting it (or taking any of the
// budget for an instant, which could refuse a post alone in flight),
// whether admitEvents would admit a post of declared length now: whether
// its whole declared body (a chunked one: its first step) fits beside the
// bytes the posts in flight hold. A post that cannot fit is refused before
// its body comes rather than part way; an "Expect: 100-continue" post is
// refused before its client sends the body.
func (s *Server) wouldAdmitEvents(declared int64) (reply, bool) {
	cur := s.eventBytes.Load()
	n := s.eventCharge(declared)
	if declared < 0 {
		n = min(n, maxReservedBody)
	}
	if n > 0 && cur > 0 && cur+n > s.cfg.MaxEventBytesInFlight {
		return s.overloadedEvents(cur, declared, n, false), false
	}
	return reply{}, true
}

// admittedKey marks, in a request's context, an event post the fast front
// end admitted before handing it to net/http (a path it does not route
// itself, e.g. an escaped spelling of /v1/events): not charged twice.
type admittedKey struct{}

// admitted is h behind admitEvents, for net/http.
func (s *Server) admitted(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(admittedKey{}) != nil {
			h(w, r)
			return
		}
		a, rep, ok := s.admitEvents(r.ContentLength)
		if !ok {
			// The body stays unread: the connection cannot carry another request.
			w.Header().Set("Connection", "close")
			rep.write(w)
			return
		}
		defer a.release()
		h(w, r.WithContext(context.WithValue(r.Context(), admittedKey{}, a)))
	}
}

// bodyHandler serves, through net/http, a route whose answer depends only on
// the request body (the fast front end calls answer itself).
func (s *Server) bodyHandler(answer func(body []byte) reply) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		buf, ok := s.readBody(w, r)
		if !ok {
			return
		}
		rep := answer(buf.Bytes())
		s.putBuf(buf)
		rep.write(w)
	}
}

// unsupportedEncoding is the 415 for a body in a content coding other than
// identity (the values of its Content-Encoding headers), unread: bodies are
// read as sent, and a gzipped one was refused as malformed JSON
// ("unexpected '\x1f'"), or, sent plain under a coding it was not in,
// accepted.
func unsupportedEncoding(codings []string) (reply, bool) {
	for _, v := range codings {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				r := errorReply(http.StatusUnsupportedMediaType,
					fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", c))
				r.identity = true
				return r, true
			}
		}
	}
	return reply{}, false
}

// readBody reads r's body into a pooled buffer (return it with putBuf),
// answering as readBodyFrom does. ok is false when an answer was written.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (buf *bytes.Buffer, ok bool) {
	if rep, bad := unsupportedEncoding(r.Header.Values("Content-Encoding")); bad {
		w.Header().Set("Connection", "close") // the body stays unread
		rep.write(w)
		return nil, false
	}
	a, _ := r.Context().Value(admittedKey{}).(*eventAdmission)
	buf, rep, ok := s.readBodyFrom(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), r.ContentLength, a)
	if !ok {
		if rep.code == http.StatusRequestEntityTooLarge || rep.code == http.StatusServiceUnavailable {
			// Close instead of draining the rest of the body. MaxBytesReader
			// would tell net/http so only through its own ResponseWriter,
			// which w (instrument's statusWriter) hides, and a body refused
			// by its declared length is not read at all.
			w.Header().Set("Connection", "close")
		}
		rep.write(w)
	}
	return buf, ok
}

// readBodyFrom reads a request body of declared length (-1 when unknown:
// chunked) from body into a pooled buffer (return it with putBuf). It
// refuses a body over the limit with a 413, from the declared length
// before reading anything, else as soon as the limit is passed, and a body
// it cannot read with a 400 (a 408 on a timeout); ok is false then, and
// the caller sends the reply. An event post's body (a: its admission, nil
// for other requests) is charged as it arrives and refused with a 503 when
// the posts in flight would hold more than their limit. Both front ends
// read bodies with it.
func (s *Server) readBodyFrom(body io.Reader, declared int64, a *eventAdmission) (buf *bytes.Buffer, rep reply, ok bool) {
	limit := s.cfg.MaxBodyBytes
	if declared > limit {
		return nil, tooLarge(declared, limit), false
	}
	if a != nil {
		body = &chargedReader{r: body, a: a}
	}
	buf, _ = s.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	// Reserve by the declared length only up to a point: a client that
	// declares 16 MiB and sends nothing must not pin 16 MiB until the read
	// timeout. Larger bodies grow the buffer as they arrive.
	if declared > 0 {
		buf.Grow(int(min(declared, maxReservedBody)))
	}
	// One byte past the limit tells an oversized body from one that fits
	// (no byte past the largest int64: limit+1 would wrap to a negative
	// count, and LimitReader would read nothing of any body).
	_, err := buf.ReadFrom(io.LimitReader(body, limit+min(1, math.MaxInt64-limit)))
	if err == nil && declared >= 0 && int64(buf.Len()) < declared {
		// The body ended before its declared length: fasthttp's body
		// stream ends so with a plain io.EOF where net/http reports
		// io.ErrUnexpectedEOF. Its events must not be appended.
		err = io.ErrUnexpectedEOF
	}
	var (
		tooBig *http.MaxBytesError
		over   *overloadError
	)
	switch {
	case errors.As(err, &tooBig) || int64(buf.Len()) > limit:
		rep = tooLarge(-1, limit)
	case errors.As(err, &over):
		rep = over.rep
	case err != nil:
		var timeout interface{ Timeout() bool }
		if errors.As(err, &timeout) && timeout.Timeout() {
			rep = errorReply(http.StatusRequestTimeout, "reading request body: "+err.Error())
		} else {
			rep = errorReply(http.StatusBadRequest, "reading request body: "+err.Error())
		}
	default:
		return buf, reply{}, true
	}
	s.putBuf(buf)
	return nil, rep, false
}

// chargedReader charges an event post's admission for its body's bytes
// as they are read, failing with an overloadError when they would take
// the posts in flight past their limit.
type chargedReader struct {
	r io.Reader
	a *eventAdmission
	n int64
}

func (c *chargedReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	if rep, ok := c.a.cover(c.n); !ok {
		return k, &overloadError{rep}
	}
	return k, err
}

// overloadError is a body refused part way for the bytes in flight.
type overloadError struct{ rep reply }

func (e *overloadError) Error() string { return string(e.rep.body) }

// maxReservedBody is the most of a request's declared length reserved
// before its bytes arrive, and the step by which an event post is charged
// ahead of its body.
const maxReservedBody = 256 << 10

func (s *Server) putBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		s.bufs.Put(b)
	}
}
