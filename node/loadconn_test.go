package node

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoadTarget(t *testing.T) {
	tests := []struct {
		target, addr, host, err string
	}{
		{target: "http://127.0.0.1:8585", addr: "127.0.0.1:8585", host: "127.0.0.1:8585"},
		{target: "http://127.0.0.1:8585/", addr: "127.0.0.1:8585", host: "127.0.0.1:8585"},
		{target: "http://localhost", addr: "localhost:80", host: "localhost"},
		{target: "https://127.0.0.1:8585", err: "plain HTTP"},
		{target: "http://127.0.0.1:8585/v1", err: "without a path"},
		{target: "127.0.0.1:8585", err: "target"},
		{target: "notaurl", err: "not a URL"},
	}
	for _, tt := range tests {
		addr, host, err := loadTarget(tt.target)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want one containing %q", tt.target, err, tt.err)
			}
			continue
		}
		if err != nil || addr != tt.addr || host != tt.host {
			t.Errorf("%q: %q %q %v, want %q %q", tt.target, addr, host, err, tt.addr, tt.host)
		}
	}
}

// TestLoadConn checks the load generator's client against net/http's
// server: keep-alive, bodies of every size, Retry-After, and a server that
// closes the connection after answering.
func TestLoadConn(t *testing.T) {
	var conns atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			writeJSON(w, http.StatusOK, body)
		case "/busy":
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "busy")
		case "/close":
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusOK, []byte("{}"))
		}
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()
	addr, host, err := loadTarget(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := newLoadConn(addr, host, time.Time{}, 0)
	defer c.close()
	for _, n := range []int{0, 1, 100, 4 << 10, 4<<10 + 1, 1 << 20} {
		body := []byte(strings.Repeat("x", n))
		a, err := c.post("/echo", body)
		if err != nil || a.status != http.StatusOK || string(a.body) != string(body) {
			t.Fatalf("echo of %d bytes: status %d, %d bytes back, %v", n, a.status, len(a.body), err)
		}
	}
	a, err := c.post("/busy", nil)
	if err != nil || a.status != http.StatusServiceUnavailable || !a.retryAfter {
		t.Fatalf("busy: %+v %v", a, err)
	}
	if conns.Load() != 1 {
		t.Fatalf("%d connections for keep-alive posts, want 1", conns.Load())
	}
	if a, err := c.post("/close", nil); err != nil || a.status != http.StatusOK {
		t.Fatalf("close: %+v %v", a, err)
	}
	if a, err := c.post("/echo", []byte("again")); err != nil || string(a.body) != "again" {
		t.Fatalf("post after a closing answer: %+v %v", a, err)
	}
	if conns.Load() != 2 {
		t.Fatalf("%d connections, want 2 (one redial after Connection: close)", conns.Load())
	}
}

// A target given as host:port, the commonest one that is not a URL, says
// so (not that loadgen does not speak the scheme "localhost", nor a URL
// parser's complaint about a colon); a URL without a host is refused, not
// dialled at port 80 of this host.
func TestLoadTargetHostPortIsNotAURL(t *testing.T) {
	for _, target := range []string{"localhost:8585", "127.0.0.1:8585", "[::1]:8585"} {
		if _, _, err := loadTarget(target); err == nil || !strings.Contains(err.Error(), "not a URL") {
			t.Errorf("%q: error %v, want one saying it is not a URL", target, err)
		}
	}
	for _, target := range []string{"http://", "http:///"} {
		if addr, _, err := loadTarget(target); err == nil || !strings.Contains(err.Error(), "no host") {
			t.Errorf("%q: addr %q, error %v, want one saying it names no host", target, addr, err)
		}
	}
}
