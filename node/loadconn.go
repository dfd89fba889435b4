package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// loadConn is the load generator's HTTP/1.1 client: one keep-alive
// connection that sends a POST and reads its answer, nothing else.
//
// Why not net/http's client: the load generator shares the machine's cores
// with the server it measures, and net/http's client spends more CPU per
// request (goroutines per connection, header maps, allocations) than the
// server's own handlers. Like wrk, loadgen keeps its own cost small so the
// figures describe the server. It understands exactly what kvidx serve
// answers: a status line, headers with Content-Length, a body.
type loadConn struct {
	addr, host string
	// stop, when set, is the run's end, and grace how long a post may
	// take from then, or from its start when it starts later: a server
	// that stops answering cannot hold the run a postTimeout past its
	// --duration, and one that answers slowly still drains.
	stop  time.Time
	grace time.Duration
	conn  net.Conn
	r     *bufio.Reader
	req   []byte
	body  []byte // the last answer's body, reused
}

// loadTarget checks a base URL ("http://host:port") and returns the address
// to dial and the Host header.
func loadTarget(target string) (addr, host string, err error) {
	if !strings.Contains(target, "://") {
		// host:port parses as a scheme and an opaque part (or not at
		// all): say what is wrong, not what the parser made of it.
		return "", "", fmt.Errorf("target %q: not a URL: give the server's base URL, http://host:port", target)
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", "", fmt.Errorf("target %q: %w", target, err)
	}
	if u.Scheme != "http" {
		return "", "", fmt.Errorf("target %q: loadgen speaks plain HTTP (http://host:port), not %q", target, u.Scheme)
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("target %q: no host: give the server's base URL, http://host:port", target)
	}
	if u.Path != "" && u.Path != "/" {
		return "", "", fmt.Errorf("target %q: give the server's base URL, without a path", target)
	}
	addr = u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return addr, u.Host, nil
}

// postTimeout bounds one POST, from writing it to reading its answer.
const postTimeout = time.Minute

// newLoadConn returns a connection to addr for a run that ends at stop,
// whose posts then get grace (see loadConn; a zero stop: no end).
func newLoadConn(addr, host string, stop time.Time, grace time.Duration) *loadConn {
	return &loadConn{addr: addr, host: host, stop: stop, grace: grace}
}

// answer is what the server said to one POST.
type answer struct {
	status     int
	retryAfter bool   // a Retry-After header came with it
	body       []byte // valid until the next post on the connection
}

// post sends body to path and reads the answer. Any I/O or protocol error
// closes the connection (the next post dials again) and is returned: a POST
// is not retried, as the server may have acted on it.
func (c *loadConn) post(path string, body []byte) (answer, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return answer{}, err
		}
		c.conn = conn
		if c.r == nil {
			c.r = bufio.NewReaderSize(conn, 16<<10)
		} else {
			c.r.Reset(conn)
		}
	}
	// A server that stops answering fails the run instead of hanging it.
	now := time.Now()
	deadline := now.Add(postTimeout)
	if end, ok := c.graceEnd(now); ok && end.Before(deadline) {
		deadline = end
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		c.close()
		return answer{}, err
	}
	c.req = append(c.req[:0], "POST "...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.host...)
	c.req = append(c.req, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	// Small bodies go in the same write as the header; big ones are not
	// copied.
	var err error
	if len(body) <= 4<<10 {
		c.req = append(c.req, body...)
		_, err = c.conn.Write(c.req)
	} else {
		bufs := net.Buffers{c.req, body}
		_, err = bufs.WriteTo(c.conn)
	}
	if err != nil {
		c.close()
		return answer{}, err
	}
	a, keep, err := c.readAnswer()
	if err != nil || !keep {
		c.close()
	}
	if err != nil {
		return answer{}, fmt.Errorf("reading the answer to POST %s: %w", path, err)
	}
	return a, nil
}

func (c *loadConn) readAnswer() (a answer, keep bool, err error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return a, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return a, false, fmt.Errorf("malformed status line %q", line)
	}
	a.status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return a, false, fmt.Errorf("malformed status line %q", line)
	}
	keep = true
	length := -1
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return a, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return a, false, fmt.Errorf("malformed header %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.Atoi(string(value))
			if err != nil || n < 0 {
				return a, false, fmt.Errorf("malformed Content-Length %q", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return a, false, fmt.Errorf("unsupported Transfer-Encoding %q", value)
		case bytes.EqualFold(name, []byte("Retry-After")):
			a.retryAfter = true
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		}
	}
	if length < 0 {
		return a, false, errors.New("answer without Content-Length")
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return a, false, err
	}
	a.body = c.body
	return a, keep, nil
}

func (c *loadConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// graceEnd is when work started at start has used its grace after the
// run's end: grace from the end, or from start if it started later. ok is
// false for a connection of a run without an end.
func (c *loadConn) graceEnd(start time.Time) (end time.Time, ok bool) {
	if c.stop.IsZero() {
		return time.Time{}, false
	}
	if start.Before(c.stop) {
		start = c.stop
	}
	return start.Add(c.grace), true
}

// overdue reports whether work started at start has run past its grace.
func (c *loadConn) overdue(start time.Time) bool {
	end, ok := c.graceEnd(start)
	return ok && time.Now().After(end)
}
