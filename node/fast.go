package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
			if ctx.IsPost() {
				switch string(ctx.URI().PathOriginal()) {
				case "/v1/match":
					s.sendFast(ctx, "match", s.match(ctx.PostBody()))
					return
				case "/v1/events":
					// Not the request's context: fasthttp ends it at
					// shutdown, when in-flight batches should finish.
					s.sendFast(ctx, "events", s.ingest(context.Background(), ctx.PostBody()))
					return
				}
			}
			slow(ctx)
		},
		ErrorHandler:       s.fastError,
		MaxRequestBodySize: int(min(s.cfg.MaxBodyBytes, int64(^uint(0)>>1))),
		ReadTimeout:        s.cfg.ReadTimeout,
		WriteTimeout:       s.cfg.WriteTimeout,
		IdleTimeout:        s.cfg.IdleTimeout,
		// Also the largest request header.
		ReadBufferSize:        maxHeaderBytes,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		Logger:                fastLogger{s.log},
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
	s.sendFast(ctx, "other", r)
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
