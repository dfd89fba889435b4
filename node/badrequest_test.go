package node

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestBadRequestsChangeNothing runs under both front-ends: the fasthttp one
// Run serves with and Server as a plain http.Handler.
func TestBadRequestsChangeNothing(t *testing.T) {
	for _, front := range fronts {
		t.Run(front.name, func(t *testing.T) { testBadRequests(t, front.serve) })
	}
}

func testBadRequests(t *testing.T, serve func(testing.TB, *Server) string) {
	e := newEnvWith(t, Config{MaxBodyBytes: 1024}, serve)
	e.do(t, "POST", "/v1/events", stored(0, 1, "null", 1, 2, 3)).want(t, 200)

	big := strings.Repeat(stored(0, 9, "null", 7)+"\n", 40) // > 1 KiB
	good := stored(0, 2, "3", 4)
	cases := []struct {
		name, method, path, body string
		chunked                  bool
		code                     int
		errHas                   string
	}{
		{"malformed json", "POST", "/v1/events", good + "\n{\"worker_id\":", false, 400, "line 2"},
		{"malformed array element", "POST", "/v1/events", "[" + good + ",{}]", false, 400, "element 1"},
		{"wrong type", "POST", "/v1/events", `{"worker_id":"7","event":{"event_id":1,"data":"cleared"}}`, false, 400, "line 1"},
		{"negative", "POST", "/v1/events", `{"worker_id":-7,"event":{"event_id":1,"data":"cleared"}}`, false, 400, "line 1"},
		{"fractional", "POST", "/v1/events", good + "\n" + `{"worker_id":7.5,"event":{"event_id":1,"data":"cleared"}}`, false, 400, "line 2"},
		{"unknown data kind", "POST", "/v1/events", `{"worker_id":7,"event":{"event_id":1,"data":"exploded"}}`, false, 400, "line 1"},
		{"empty body", "POST", "/v1/events", "", false, 400, "no events"},
		{"blank lines only", "POST", "/v1/events", "\n \n", false, 400, "no events"},
		{"empty array", "POST", "/v1/events", "[]", false, 400, "no events"},
		{"oversized", "POST", "/v1/events", big, false, 413, "limit of 1024"},
		{"oversized chunked", "POST", "/v1/events", big, true, 413, "limit of 1024"},
		{"match malformed", "POST", "/v1/match", `{"local_hashes":[1,2`, false, 400, "query"},
		{"match negative hash", "POST", "/v1/match", `{"local_hashes":[1,-2]}`, false, 400, "local_hashes"},
		{"match fractional hash", "POST", "/v1/match", `{"local_hashes":[1.5]}`, false, 400, "local_hashes"},
		{"match fractional token", "POST", "/v1/match", `{"tokens":[1,2.5]}`, false, 400, "tokens"},
		{"match string hash", "POST", "/v1/match", `{"local_hashes":["1"]}`, false, 400, "local_hashes"},
		{"match both", "POST", "/v1/match", `{"local_hashes":[1],"tokens":[1]}`, false, 400, "both"},
		{"match neither", "POST", "/v1/match", `{}`, false, 400, "required"},
		{"match empty body", "POST", "/v1/match", ``, false, 400, "query"},
		{"match oversized", "POST", "/v1/match", `{"local_hashes":[` + strings.Repeat("1,", 600) + `1]}`, false, 413, "limit"},
		{"wrong method events", "GET", "/v1/events", "", false, 405, "not allowed"},
		{"wrong method match", "PUT", "/v1/match", `{"local_hashes":[1]}`, false, 405, "not allowed"},
		{"wrong method workers", "POST", "/v1/workers", "", false, 405, "not allowed"},
		{"wrong method worker", "GET", "/v1/workers/0", "", false, 405, "not allowed"},
		{"unknown path", "GET", "/v2/nothing", "", false, 404, "no such path"},
		{"unknown path, hot method", "POST", "/v1/matches", `{"local_hashes":[1]}`, false, 404, "no such path"},
		{"unknown worker", "DELETE", "/v1/workers/42", "", false, 404, "worker 42"},
		{"bad worker id", "DELETE", "/v1/workers/-1", "", false, 400, "worker id"},
		{"huge worker id", "DELETE", "/v1/workers/18446744073709551616", "", false, 400, "worker id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.store.ix.Stats()
			appends, _ := e.store.counts()
			newReq := func() *http.Request {
				var rd io.Reader = strings.NewReader(c.body)
				if c.chunked {
					rd = io.MultiReader(strings.NewReader(c.body)) // unknown length: chunked
				}
				req, err := http.NewRequest(c.method, e.url+c.path, rd)
				if err != nil {
					t.Fatal(err)
				}
				if c.chunked && req.ContentLength != 0 {
					t.Fatalf("body not chunked: Content-Length %d", req.ContentLength)
				}
				return req
			}
			r, err := trySend(newReq())
			// The server answers an oversized body and closes while the
			// client may still be writing it: on a loaded machine the
			// client's write can fail first (broken pipe, reset), before
			// it reads the answer. Ask again to read it.
			for try := 0; err != nil && c.code == 413 && try < 20 && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)); try++ {
				r, err = trySend(newReq())
			}
			if err != nil {
				t.Fatalf("%s %s: %v", c.method, c.path, err)
			}
			if r.code != c.code {
				t.Fatalf("status %d, want %d: %s", r.code, c.code, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var eb struct {
				Error string `json:"error"`
			}
			r.decode(t, &eb)
			if !strings.Contains(eb.Error, c.errHas) {
				t.Errorf("error %q lacks %q", eb.Error, c.errHas)
			}
			if c.code == 405 && r.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
			if a, _ := e.store.counts(); a != appends || e.store.ix.Stats() != before {
				t.Errorf("request changed the store: appends %d -> %d", appends, a)
			}
		})
	}
	// The server still works after all that.
	r := e.do(t, "POST", "/v1/match", `{"local_hashes":[1,2,3]}`).want(t, 200)
	if !bytes.Contains(r.body, []byte(`"matched_blocks":3`)) {
		t.Fatalf("match: %s", r.body)
	}
}

// TestContentEncodingRefused: a body in a content coding other than
// identity gets a 415 naming it, with Accept-Encoding: identity, and
// changes nothing, on both front ends; a gzipped body was refused as
// malformed JSON, and a plain one labelled gzip accepted.
func TestContentEncodingRefused(t *testing.T) {
	for _, front := range fronts {
		t.Run(front.name, func(t *testing.T) {
			e := newEnvWith(t, Config{}, front.serve)
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			if _, err := zw.Write([]byte(stored(0, 1, "null", 1, 2))); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			cases := []struct {
				name, path, body string
				encodings        []string
				code             int
			}{
				{"gzip events", "/v1/events", gz.String(), []string{"gzip"}, 415},
				{"plain events labelled br", "/v1/events", stored(0, 1, "null", 1, 2), []string{"br"}, 415},
				{"plain events labelled identity, gzip", "/v1/events", stored(0, 1, "null", 1, 2), []string{"identity, gzip"}, 415},
				{"two headers", "/v1/events", stored(0, 1, "null", 1, 2), []string{"identity", "deflate"}, 415},
				{"match labelled gzip", "/v1/match", `{"local_hashes":[1]}`, []string{"GZIP"}, 415},
				{"escaped events path", "/v1/%65vents", stored(0, 1, "null", 1, 2), []string{"gzip"}, 415},
				{"identity", "/v1/match", `{"local_hashes":[1]}`, []string{"Identity"}, 200},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					before := e.store.ix.Stats()
					appends, _ := e.store.counts()
					req, err := http.NewRequest("POST", e.url+c.path, strings.NewReader(c.body))
					if err != nil {
						t.Fatal(err)
					}
					for _, v := range c.encodings {
						req.Header.Add("Content-Encoding", v)
					}
					r := e.send(t, req).want(t, c.code)
					if a, _ := e.store.counts(); a != appends || e.store.ix.Stats() != before {
						t.Errorf("request changed the store: appends %d -> %d", appends, a)
					}
					if c.code != 415 {
						return
					}
					var eb struct {
						Error string `json:"error"`
					}
					r.decode(t, &eb)
					if !strings.Contains(eb.Error, "Content-Encoding") || !strings.Contains(eb.Error, "uncompressed") {
						t.Errorf("error %q", eb.Error)
					}
					if got := r.header.Get("Accept-Encoding"); got != "identity" {
						t.Errorf("Accept-Encoding %q, want identity", got)
					}
				})
			}
		})
	}
}

// TestEventsContentTypeNotConsulted: POST /v1/events reads NDJSON, or a
// JSON array when the body starts with "[", whatever Content-Type says
// (issue 6), on both front ends: a form or multipart type must not make
// the server parse the body as a form, and a JSON type must not make it
// read NDJSON as one document.
func TestEventsContentTypeNotConsulted(t *testing.T) {
	for _, front := range fronts {
		t.Run(front.name, func(t *testing.T) {
			e := newEnvWith(t, Config{}, front.serve)
			for i, c := range []struct {
				name, contentType string
				array             bool
			}{
				{"ndjson as application/json", "application/json", false},
				{"ndjson as multipart", "multipart/form-data; boundary=xyz", false},
				{"ndjson as a form", "application/x-www-form-urlencoded", false},
				{"ndjson without a type", "", false},
				{"array as application/x-ndjson", "application/x-ndjson", true},
				{"array as text/plain", "text/plain", true},
				{"array as multipart", "multipart/form-data; boundary=xyz", true},
			} {
				t.Run(c.name, func(t *testing.T) {
					// Two events, so that a body read as one JSON document
					// or as one NDJSON line cannot pass.
					worker := uint64(i)
					body := stored(worker, 1, "null", 1) + "\n" + stored(worker, 2, fmt.Sprint(1000*worker+1), 2) + "\n"
					if c.array {
						body = "[" + stored(worker, 1, "null", 1) + "," + stored(worker, 2, fmt.Sprint(1000*worker+1), 2) + "]"
					}
					req, err := http.NewRequest("POST", e.url+"/v1/events", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					if c.contentType != "" {
						req.Header.Set("Content-Type", c.contentType)
					}
					appends, _ := e.store.counts()
					var ea eventsAnswer
					e.send(t, req).want(t, 200).decode(t, &ea)
					if ea.Accepted != 2 || len(ea.Rejected) != 0 {
						t.Fatalf("answer %+v, want both events accepted", ea)
					}
					if a, _ := e.store.counts(); a != appends+1 {
						t.Fatalf("appends %d -> %d, want one more", appends, a)
					}
					var ma matchAnswer
					e.do(t, "POST", "/v1/match", fmt.Sprintf(`{"local_hashes":[1,2],"candidates":[{"worker_id":%d}]}`, worker)).want(t, 200).decode(t, &ma)
					if got, want := fmt.Sprint(ma), fmt.Sprintf("{[{%d 0 2}] 2}", worker); got != want {
						t.Fatalf("match %s, want %s", got, want)
					}
				})
			}
		})
	}
}
