package node

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// stormPost is one raw event post of a storm: how it is sent and how its
// client leaves.
type stormPost struct {
	path    string // as sent
	head    string // header lines past Host, each ending in \r\n
	body    []byte // what is sent of the body
	chunked bool   // body sent in chunks, with the last chunk unless abort
	abort   bool   // the client closes once the body (or part of it) is sent
	stall   time.Duration
}

// send sends p on a new connection to addr and returns the answer's
// status, 0 when there was none (aborted, or the connection closed under
// a refused body).
func (p stormPost) send(addr string) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return -1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n", p.path, p.head)
	if !p.chunked {
		req.Write(p.body)
	} else {
		for b := p.body; len(b) > 0; {
			n := min(len(b), 1+len(b)/3)
			fmt.Fprintf(&req, "%x\r\n%s\r\n", n, b[:n])
			b = b[n:]
		}
		if !p.abort {
			req.WriteString("0\r\n\r\n")
		}
	}
	br := bufio.NewReader(c)
	if strings.Contains(p.head, "Expect: 100-continue") {
		head, _ := bytes.CutSuffix(req.Bytes(), p.body)
		_, _ = c.Write(head)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0
		}
		if resp.StatusCode != http.StatusContinue {
			return resp.StatusCode
		}
		req.Next(len(head))
	}
	// A refused body closes the connection under the writer: the answer
	// may still be read.
	_, _ = c.Write(req.Bytes())
	if p.stall > 0 {
		time.Sleep(p.stall)
	}
	if p.abort {
		return 0
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// randomStormPost is a post of a random size (some past the budget, some
// past MaxBodyBytes), sent whole or chunked, some malformed, compressed or
// under an escaped path, some cut short, some stalled and then closed.
func randomStormPost(r *rand.Rand, cfg Config) stormPost {
	line := `{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":"cleared"}}` + "\n"
	var size int
	switch r.IntN(4) {
	case 0, 1:
		size = 1 + r.IntN(64<<10)
	case 2:
		size = 1 + r.IntN(int(cfg.MaxEventBytesInFlight))
	default:
		size = 1 + r.IntN(int(cfg.MaxBodyBytes))
	}
	body := []byte(strings.Repeat(line, size/len(line)+1))
	size = len(body)
	p := stormPost{path: "/v1/events", body: body}
	declared := len(body)
	switch r.IntN(10) {
	case 0:
		p.chunked = true
	case 1:
		p.path = "/v1/%65vents"
	case 2:
		body[size-2] = 'x' // malformed: a 400
	case 3:
		p.head = "Content-Encoding: gzip\r\n"
	case 4:
		p.abort = true
		p.body = body[:r.IntN(size)]
	case 5:
		p.abort = true
		p.chunked = true
		p.body = body[:r.IntN(size)]
	case 6:
		p.abort = true
		p.stall = time.Duration(r.IntN(300)) * time.Millisecond
		p.body = body[:r.IntN(size)]
	case 7:
		declared = int(cfg.MaxBodyBytes) + 1 + r.IntN(1000) // a 413
		p.body = nil
	case 8:
		p.head = "Expect: 100-continue\r\n"
	}
	if p.chunked {
		p.head += "Transfer-Encoding: chunked\r\n"
	} else {
		p.head += fmt.Sprintf("Content-Length: %d\r\n", declared)
	}
	return p
}

// A storm of concurrent event posts of every kind, on both front ends,
// leaves no byte of the in-flight budget held, and the server answers
// after it.
func TestEventBytesReturnToZeroAfterAStorm(t *testing.T) {
	for _, front := range fronts {
		t.Run(front.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxEventBytesInFlight = 4 * maxReservedBody
			cfg.MaxBodyBytes = 6 * maxReservedBody
			cfg.ReadTimeout = 2 * time.Second
			e := newEnvWith(t, cfg, front.serve)
			addr := strings.TrimPrefix(e.url, "http://")
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				codes = map[int]int{}
			)
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range 12 {
						code := randomStormPost(r, cfg).send(addr)
						mu.Lock()
						codes[code]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			t.Logf("answers by status: %v", codes)
			waitNoEventBytes(t, e.srv, "after the storm")
			// A post the server was still reading when the count was 0 (a
			// client gone before the server read its request) may be
			// admitted after it: the last post, larger than the budget
			// and so admitted only alone, retries on its 503 as a client
			// does. A byte left held would refuse it to the end.
			big := strings.Repeat(`{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":"cleared"}}`+"\n", int(cfg.MaxBodyBytes)/70)
			r := e.do(t, "POST", "/v1/events", big)
			for deadline := time.Now().Add(10 * time.Second); r.code == http.StatusServiceUnavailable && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
				r = e.do(t, "POST", "/v1/events", big)
			}
			r.want(t, http.StatusOK)
			waitNoEventBytes(t, e.srv, "after a last post")
		})
	}
}

// waitNoEventBytes waits until no event post holds any of srv's budget
// (a post releases it after its answer is sent).
func waitNoEventBytes(t *testing.T, srv *Server, when string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); srv.eventBytes.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes in flight %s, want 0", srv.eventBytes.Load(), when)
		}
	}
}

// A post alone in flight is charged its body as it arrives whatever the
// budget, even while other posts are refused meanwhile: a refused post
// must not take any of the budget for an instant (found by review: each
// refused post added its step and took it back, and a post past the
// budget alone, charged its next step in that instant, got a 503 part
// way).
func TestRefusedPostsTakeNothingFromAPostAlone(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEventBytesInFlight = 1000
	cfg.MaxBodyBytes = 1 << 40
	srv, _ := newServerOnFake(cfg)
	alone, _, ok := srv.admitEvents(cfg.MaxBodyBytes)
	if !ok {
		t.Fatal("a post alone was refused")
	}
	defer alone.release()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					if a, _, ok := srv.admitEvents(1000); ok {
						a.release()
						t.Error("a post was admitted beside one past the budget")
						return
					}
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i := range int64(1000000) {
		if rep, ok := alone.cover(i * maxReservedBody); !ok {
			t.Fatalf("a post alone refused after %d steps: %s", i, rep.body)
		}
	}
}

// A post past the budget alone gets in, charged as its body arrives, on
// either front end, whether its length is declared or not, and when the
// fast front end hands it to net/http (an escaped path): charged once,
// released once.
func TestAPostAlonePastTheBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEventBytesInFlight = maxReservedBody
	line := `{"worker_id":1,"event":{"event_id":1,"dp_rank":0,"data":"cleared"}}` + "\n"
	body := strings.Repeat(line, 5*maxReservedBody/len(line))
	for _, front := range fronts {
		for _, path := range []string{"/v1/events", "/v1/%65vents"} {
			for _, chunked := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s %s chunked=%v", front.name, path, chunked), func(t *testing.T) {
					e := newEnvWith(t, cfg, front.serve)
					req, err := http.NewRequest("POST", e.url+"/v1/events", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					req.URL.RawPath = path
					if chunked {
						req.ContentLength = -1
						req.Body = io.NopCloser(strings.NewReader(body)) // unknown length: sent chunked
					}
					e.send(t, req).want(t, http.StatusOK)
					waitNoEventBytes(t, e.srv, "after a post alone")
				})
			}
		}
	}
}

// A panic under an event post, recovered by recoverFast, returns its
// bytes, whether fasthttp answers the post itself or hands it to net/http.
func TestPanicReleasesEventBytes(t *testing.T) {
	for _, path := range []string{"/v1/events", "/v1/%65vents"} {
		t.Run(path, func(t *testing.T) {
			srv := New(Config{Logger: quietLogger()})
			srv.SetStore(panicStore{newFakeStore()})
			url := serveFront(t, srv)
			req, err := http.NewRequest("POST", url+"/v1/events", strings.NewReader(stored(0, 1, "null", 1)))
			if err != nil {
				t.Fatal(err)
			}
			req.URL.RawPath = path
			r, err := trySend(req)
			if err != nil || r.code != http.StatusInternalServerError {
				t.Fatalf("answer %d %s, %v: want a 500", r.code, r.body, err)
			}
			waitNoEventBytes(t, srv, "after a panic")
		})
	}
}

// A post refused part way is told what it is counted: its first bytes of
// its declared length, or, of unknown length, what came and what comes
// next, not all of it ahead of its body (found by review).
func TestEventPostRefusedPartWay(t *testing.T) {
	const limit = 4 * maxReservedBody
	for _, tt := range []struct {
		name     string
		declared int64
		want     string
	}{
		{"declared", 3 * maxReservedBody, fmt.Sprintf("event posts of %d bytes in all are in flight, and this one's first %d of %d bytes would pass the limit of %d", 3*maxReservedBody, 2*maxReservedBody, 3*maxReservedBody, limit)},
		{"chunked", -1, fmt.Sprintf("event posts of %d bytes in all are in flight, and this one, of unknown length (chunked), counted %d bytes for what of its body came and what comes next, would pass the limit of %d", 3*maxReservedBody, 2*maxReservedBody, limit)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxEventBytesInFlight = limit
			srv, _ := newServerOnFake(cfg)
			other, _, ok := srv.admitEvents(8 << 20)
			if !ok {
				t.Fatal("the first post was refused")
			}
			defer other.release()
			a, _, ok := srv.admitEvents(tt.declared)
			if !ok {
				t.Fatal("the second post was refused before its body came")
			}
			defer a.release()
			// The first post's body comes on while the second is admitted.
			if _, ok := other.cover(2 * maxReservedBody); !ok {
				t.Fatal("the first post was refused part way")
			}
			_, rep, ok := srv.readBodyFrom(bytes.NewReader(make([]byte, 3*maxReservedBody)), tt.declared, a)
			if ok || rep.code != http.StatusServiceUnavailable || !strings.Contains(string(rep.body), tt.want) {
				t.Fatalf("answer %d %s, want a 503 with %q", rep.code, rep.body, tt.want)
			}
			if got := srv.eventBytes.Load(); got != other.held+a.held || a.held != maxReservedBody {
				t.Fatalf("%d bytes in flight, the two posts hold %d and %d", got, other.held, a.held)
			}
		})
	}
}
