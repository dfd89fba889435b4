package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// TestRunStopsRightAfterStart: a cancellation that comes before fasthttp
// has registered its listener still ends Run (as at a failed recovery).
func TestRunStopsRightAfterStart(t *testing.T) {
	for range 20 {
		srv := New(Config{Logger: quietLogger(), FinalSnapshot: false})
		_, stop := startRun(t, srv)
		done := make(chan error, 1)
		go func() { done <- stop() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after an immediate cancellation")
		}
	}
}

// panicStore panics on Append, standing in for any bug under a request.
type panicStore struct{ *fakeStore }

func (panicStore) Append(context.Context, []engine.Event, []wal.Position) (uint64, []error, error) {
	panic("append exploded")
}

// TestPanicIsA500: a panic under a request is answered with a JSON 500 and
// the server keeps serving.
func TestPanicIsA500(t *testing.T) {
	srv := New(Config{Logger: quietLogger()})
	srv.SetStore(panicStore{newFakeStore()})
	e := &testEnv{srv: srv, url: serveFront(t, srv)}
	r := e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1)).want(t, 500)
	if !strings.Contains(string(r.body), "append exploded") {
		t.Fatalf("answer %s", r.body)
	}
	e.do(t, "POST", "/v1/match", `{"local_hashes":[1]}`).want(t, 200)
}

// TestExpectContinueOverLimit: a body announced over the limit with
// "Expect: 100-continue" is refused before the client sends it.
func TestExpectContinueOverLimit(t *testing.T) {
	e := newEnv(t, Config{MaxBodyBytes: 1024})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = conn.Write([]byte("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"error":"request body of 5000 bytes exceeds the limit of 1024 bytes"`) {
		t.Fatalf("status %d, body %q: want 413 (without 100 Continue) and a JSON error", resp.StatusCode, body)
	}
}

// TestDrainingRefusesNewWork: once Run stops serving, requests still
// arriving on kept-alive connections get a 503 and a closed connection.
func TestDrainingRefusesNewWork(t *testing.T) {
	e := newEnv(t, DefaultConfig())
	e.srv.draining.Store(true)
	resp, err := http.Post(e.url+"/v1/events", "", strings.NewReader(stored(0, 1, "null", 1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, connection close %v, headers %v", resp.StatusCode, resp.Close, resp.Header)
	}
	if a, _ := e.store.counts(); a != 0 {
		t.Fatalf("%d appends while draining", a)
	}
}

// Paths not in canonical form are not the API's: a JSON 404, not the
// mux's redirect with an HTML body.
func TestUncleanPathIsNotFound(t *testing.T) {
	for _, serve := range []func(testing.TB, *Server) string{serveFront, serveNetHTTP} {
		e := newEnvWith(t, DefaultConfig(), serve)
		for _, p := range []string{"//v1/match", "/v1/../v1/stats", "//nothing", "/v1/stats/"} {
			r := e.do(t, "GET", p, "")
			if r.code != http.StatusNotFound || !strings.Contains(string(r.body), `"error":"no such path`) {
				t.Errorf("GET %s: %d %s", p, r.code, r.body)
			}
		}
	}
}

// A request target that is no path ("*", as in OPTIONS *) is not the
// API's either: a JSON 404 (or fasthttp's own 400), not the mux's redirect
// to "/%2A".
func TestAsteriskTargetIsNotFound(t *testing.T) {
	for _, front := range fronts {
		t.Run(front.name, func(t *testing.T) {
			e := newEnvWith(t, DefaultConfig(), front.serve)
			for _, method := range []string{"GET", "POST", "OPTIONS"} {
				conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := fmt.Fprintf(conn, "%s * HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", method); err != nil {
					t.Fatal(err)
				}
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("%s *: %v", method, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if method == "OPTIONS" && front.name == "net_http" && resp.StatusCode == http.StatusOK {
					continue // net/http answers OPTIONS * itself
				}
				// fasthttp itself refuses "*" but with OPTIONS (a 400).
				if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(string(body), `"error":`) {
					t.Errorf("%s *: %d Location %q %s", method, resp.StatusCode, resp.Header.Get("Location"), body)
				}
			}
		})
	}
}

// TestStalledBodyTimesOut: a body that stops arriving past what fasthttp
// reads ahead ends in a JSON 408 and a closed connection.
func TestStalledBodyTimesOut(t *testing.T) {
	e := newEnv(t, Config{ReadTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat(" ", 20000))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"error":"reading request body`) {
		t.Fatalf("status %d, body %q: want 408 and a JSON error", resp.StatusCode, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection still open after the 408 (read: %v)", err)
	}
}

// TestDeclaredOverLimitRefusedAtOnce: a body whose declared length is over
// the limit gets its 413 from the header, without waiting for body bytes
// (fasthttp read up to 8 KiB of it first, so a client that sent less and
// waited got a 408 at the read timeout), and the connection closes. A
// client sending the header that carries the declared length to the
// handler is served as usual.
func TestDeclaredOverLimitRefusedAtOnce(t *testing.T) {
	for _, front := range fronts {
		paths := []string{"/v1/events", "/v1/match"}
		if front.name == "fasthttp" {
			paths = append(paths, "/v1/snapshot") // refused by the front end
		}
		for _, path := range paths {
			t.Run(front.name+path, func(t *testing.T) {
				e := newEnvWith(t, Config{MaxBodyBytes: 1024, ReadTimeout: 30 * time.Second}, front.serve)
				conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{\"", path, 1<<20)
				conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer before the body: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"error":"request body of 1048576 bytes exceeds the limit of 1024 bytes"`) {
					t.Fatalf("status %d, body %q: want 413 and a JSON error", resp.StatusCode, body)
				}
				if _, err := br.ReadByte(); err != io.EOF {
					t.Fatalf("connection still open after the 413 (read: %v)", err)
				}
			})
		}
	}
	e := newEnv(t, Config{MaxBodyBytes: 1024})
	req, err := http.NewRequest("POST", e.url+"/v1/match", strings.NewReader(`{"local_hashes":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(overLimitHeader, "5000")
	e.send(t, req).want(t, 200)
}
