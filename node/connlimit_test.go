package node

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestMaxConnsFor(t *testing.T) {
	cases := []struct {
		openFiles uint64
		want      int
	}{
		{0, fasthttpMaxConns},
		{1 << 40, fasthttpMaxConns},
		{^uint64(0), fasthttpMaxConns},
		{20000, 17500},
		{1024, 768},
		{300, 150},
		{1, 1},
		{255, 127},
		{256, 128},
		{257, 128},
		{512, 256},
		// Past fasthttp's default the reserve is still an eighth: a limit
		// just past it was given all of it but one descriptor.
		{fasthttpMaxConns, fasthttpMaxConns - fasthttpMaxConns/8},
		{fasthttpMaxConns + 1, fasthttpMaxConns + 1 - fasthttpMaxConns/8},
		{fasthttpMaxConns + fasthttpMaxConns/4, fasthttpMaxConns},
		{1 << 63, fasthttpMaxConns},
	}
	for _, c := range cases {
		if got := maxConnsFor(c.openFiles); got != c.want {
			t.Errorf("maxConnsFor(%d) = %d, want %d", c.openFiles, got, c.want)
		}
	}
	if n := DefaultConfig().MaxConns; n < 1 || n > fasthttpMaxConns {
		t.Errorf("DefaultConfig().MaxConns = %d", n)
	}
}

// TestMaxConnsRefusesPastTheBound: connections held open (idle, or slow)
// past Config.MaxConns are refused with a 503 and closed instead of
// taking file descriptors without end; one closing makes room again.
func TestMaxConnsRefusesPastTheBound(t *testing.T) {
	e := newEnvWith(t, Config{MaxConns: 2}, serveFront)
	addr := strings.TrimPrefix(e.url, "http://")
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader) (int, error) {
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return 0, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Two connections served and kept alive: the bound.
	var held []net.Conn
	for range 2 {
		c, br := dial()
		if code, err := get(c, br); err != nil || code != 200 {
			t.Fatalf("connection within the bound: %d %v", code, err)
		}
		held = append(held, c)
	}
	// fasthttp answers at once, before the request: read that answer.
	c, br := dial()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("connection past the bound: %v, want a 503", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("connection past the bound: %d, want 503", resp.StatusCode)
	}
	held[0].Close()
	waitFor(t, "a new connection served once one closed", func() bool {
		c, br := dial()
		code, err := get(c, br)
		c.Close()
		return err == nil && code == 200
	})
}
