package node

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// fastServer is the HTTP front-end [Server.Run] serves with: fasthttp
// answers the two hot routes (POST /v1/match, POST /v1/events) itself and
// hands every other request to [Server.ServeHTTP] through fasthttpadaptor,
// so routing, 404/405 answers and the rarer routes have one implementation.
//
// Why fasthttp: under load the router node's CPU goes to the HTTP stack,
// not to the index. Measured on 2 cores with a minimal keep-alive client and
// 64 connections, net/http answered ~30-36k match requests/s at ~37 µs of
// CPU each; fasthttp serves the same request in less than half of that.
func (s *Server) fastServer() *fasthttp.Server {
	slow := fasthttpadaptor.NewFastHTTPHandler(s)
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			defer s.recoverFast(ctx)
			if s.draining.Load() {
				// Run's drain timed out, or the request came on a
				// connection kept alive across the drain: no new work.
				ctx.SetConnectionClose()
				s.sendFast(ctx, "other", retryReply("shutting down"))
				return
			}
			// Admitted by the decoded path: an escaped spelling of
			// /v1/events, which net/http may route to the events handler,
			// must not have its body read first. Routing below stays on
			// the path as sent, as net/http routes (unclean paths 404).
			if isEventPost(ctx) {
				a, rep, ok := s.admitEvents(max(declaredLength(ctx), -1))
				if !ok {
					ctx.SetConnectionClose() // the body stays unread
					s.sendFast(ctx, "events", rep)
					return
				}
				defer a.release()
				ctx.SetUserValue(admittedKey{}, a)
			}
			if rep, bad := unsupportedFastEncoding(ctx); bad {
				ctx.SetConnectionClose() // the body stays unread
				s.sendFast(ctx, routeOf(ctx), rep)
				return
			}
			buf, rep, ok := s.readFastBody(ctx)
			if !ok {
				// What is left of the body stays unread: the connection
				// cannot carry another request.
				ctx.SetConnectionClose()
				s.sendFast(ctx, routeOf(ctx), rep)
				return
			}
			defer s.putBuf(buf)
			if ctx.IsPost() {
				switch string(ctx.URI().PathOriginal()) {
				case "/v1/match":
					s.sendFast(ctx, "match", s.match(buf.Bytes()))
					return
				case "/v1/events":
					s.sendFast(ctx, "events", s.ingest(buf.Bytes()))
					return
				}
			}
			ctx.Request.SetBodyRaw(buf.Bytes())
			slow(ctx)
			// The buffer goes back to the pool: fasthttp must not see it.
			ctx.Request.ResetBody()
		},
		ErrorHandler: s.fastError,
		// A body declared over the limit is refused from the header, as
		// net/http refuses it: with StreamRequestBody fasthttp reads up to
		// 8 KiB of a body before the handler runs, so the refusal waited
		// for bytes the client need not send (a 408 at the read timeout
		// instead of a 413). It is declared empty, so fasthttp reads none
		// of it, and its declared length goes to the handler in
		// overLimitHeader; a client's own overLimitHeader is dropped.
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if n := h.ContentLength(); int64(n) > s.cfg.MaxBodyBytes {
				h.Set(overLimitHeader, strconv.Itoa(n))
				h.SetContentLength(0)
			} else {
				h.Del(overLimitHeader)
			}
			return fasthttp.RequestConfig{}
		},
		// An "Expect: 100-continue" body over the limit is refused before
		// the client sends it, as net/http refused it from Content-Length,
		// with the JSON error every other answer carries.
		ExpectHandler: func(ctx *fasthttp.RequestCtx) int {
			if n := declaredLength(ctx); n > s.cfg.MaxBodyBytes {
				s.sendFast(ctx, routeOf(ctx), tooLarge(n, s.cfg.MaxBodyBytes))
				return http.StatusRequestEntityTooLarge
			}
			if rep, bad := unsupportedFastEncoding(ctx); bad {
				s.sendFast(ctx, routeOf(ctx), rep)
				return http.StatusUnsupportedMediaType
			}
			// An event post the server would not admit now is refused
			// before its client sends the body, as net/http does.
			if isEventPost(ctx) {
				if rep, ok := s.wouldAdmitEvents(max(declaredLength(ctx), -1)); !ok {
					s.sendFast(ctx, "events", rep)
					return http.StatusServiceUnavailable
				}
			}
			return http.StatusContinue
		},
		// A connection past MaxConns gets fasthttp's plain-text 503.
		Concurrency:        s.cfg.MaxConns,
		MaxRequestBodySize: int(min(s.cfg.MaxBodyBytes, int64(^uint(0)>>1))),
		// The handler reads bodies itself (readFastBody): fasthttp would
		// reserve a body's whole declared length before any of it came.
		StreamRequestBody: true,
		// fasthttp has no header timeout: ReadTimeout bounds the header
		// and the body together.
		ReadTimeout:  s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout,
		IdleTimeout:  s.cfg.IdleTimeout,
		// Also the largest request header.
		ReadBufferSize:               maxHeaderBytes,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		CloseOnShutdown:              true,
		Logger:                       fastLogger{s.log},
	}
}

// readFastBody reads the body of a fasthttp request as readBodyFrom does:
// the buffer grows as bytes arrive, so a client that declares a large body
// and sends little pins what fasthttp reads ahead (at most 8 KiB) and what
// readBodyFrom reserves (at most maxReservedBody), not the declared length.
func (s *Server) readFastBody(ctx *fasthttp.RequestCtx) (*bytes.Buffer, reply, bool) {
	// -1: chunked; -2: no length and no body (fasthttp reads none).
	declared := max(declaredLength(ctx), -1)
	body := ctx.RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(ctx.Request.Body())
	}
	a, _ := ctx.UserValue(admittedKey{}).(*eventAdmission)
	return s.readBodyFrom(body, declared, a)
}

// unsupportedFastEncoding is unsupportedEncoding for the routes fasthttp
// answers itself (net/http's readBody checks the others).
func unsupportedFastEncoding(ctx *fasthttp.RequestCtx) (reply, bool) {
	if !ctx.IsPost() || routeOf(ctx) == "other" {
		return reply{}, false
	}
	var codings []string
	for _, v := range ctx.Request.Header.PeekAll("Content-Encoding") {
		codings = append(codings, string(v))
	}
	return unsupportedEncoding(codings)
}

// overLimitHeader carries the declared length of a body over the limit
// from HeaderReceived, which declares the body empty, to the handler.
const overLimitHeader = "X-Kvidx-Declared-Over-Limit"

// declaredLength is a fasthttp request's declared body length, as
// RequestHeader.ContentLength returns it, before HeaderReceived declared a
// body over the limit empty.
func declaredLength(ctx *fasthttp.RequestCtx) int64 {
	if v := ctx.Request.Header.Peek(overLimitHeader); v != nil {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return n
		}
	}
	return int64(ctx.Request.Header.ContentLength())
}

// recoverFast turns a panic while serving one request into a logged JSON
// 500, as net/http does for its handlers; fasthttp would let it end the
// process.
func (s *Server) recoverFast(ctx *fasthttp.RequestCtx) {
	if v := recover(); v != nil {
		s.log.Error("panic serving a request", "method", string(ctx.Method()), "path", string(ctx.Path()), "panic", v, "stack", string(debug.Stack()))
		ctx.SetConnectionClose()
		s.sendFast(ctx, "other", errorReply(http.StatusInternalServerError, fmt.Sprintf("internal error: %v", v)))
	}
}

// maxHeaderBytes bounds a request's header.
const maxHeaderBytes = 16 << 10

// sendFast answers a fasthttp request with r and counts it.
func (s *Server) sendFast(ctx *fasthttp.RequestCtx, route string, r reply) {
	ctx.SetStatusCode(r.code)
	ctx.SetContentType("application/json")
	if r.retryAfter {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	if r.identity {
		ctx.Response.Header.Set("Accept-Encoding", "identity")
	}
	ctx.SetBody(r.body)
	s.countRequest(route, r.code)
}

// fastError answers a request fasthttp could not read: too large a body
// (413, as readBody would), too large a header (431), a timeout (408) or a
// malformed request (400), all with a JSON error.
func (s *Server) fastError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var timeout interface{ Timeout() bool }
	var r reply
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		length := int64(ctx.Request.Header.ContentLength())
		if length <= s.cfg.MaxBodyBytes { // chunked, or unknown
			length = -1
		}
		r = tooLarge(length, s.cfg.MaxBodyBytes)
	case errors.As(err, &small):
		r = errorReply(http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request header exceeds %d bytes", maxHeaderBytes))
	case errors.As(err, &timeout) && timeout.Timeout():
		r = errorReply(http.StatusRequestTimeout, "reading the request: "+err.Error())
	default:
		r = errorReply(http.StatusBadRequest, "malformed request: "+err.Error())
	}
	s.sendFast(ctx, routeOf(ctx), r)
}

// routeOf names a request's route for metrics, as far as fastError needs.
func routeOf(ctx *fasthttp.RequestCtx) string {
	switch string(ctx.URI().PathOriginal()) {
	case "/v1/match":
		return "match"
	case "/v1/events":
		return "events"
	}
	return "other"
}

// fastLogger sends fasthttp's own messages to the server's log: a client's
// broken request (already answered by fastError) at debug level, anything
// else as a warning.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	msg := "http: " + fmt.Sprintf(format, args...)
	if strings.HasPrefix(format, "error when serving connection") {
		l.log.Debug(msg)
		return
	}
	l.log.Warn(msg)
}

// isEventPost tells a POST whose decoded path is /v1/events.
func isEventPost(ctx *fasthttp.RequestCtx) bool {
	return ctx.IsPost() && string(ctx.URI().Path()) == "/v1/events"
}
