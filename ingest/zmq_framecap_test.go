package ingest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// zmtpGreeting is a ZMTP 3.1 NULL greeting (client side).
func zmtpGreeting() []byte {
	g := make([]byte, zmtpGreetingLen)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 1
	copy(g[12:], "NULL")
	return g
}

// zmtpFrame encodes one frame: short when the body fits a 1-byte size and
// long is false, long otherwise.
func zmtpFrame(flags byte, body []byte, long bool) []byte {
	if long || len(body) > 255 {
		b := binary.BigEndian.AppendUint64([]byte{flags | 0x02}, uint64(len(body)))
		return append(b, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// zmtpReady is a NULL READY command frame from a socket of type typ.
func zmtpReady(typ string) []byte {
	body := append([]byte{5}, "READY"...)
	body = append(body, byte(len("Socket-Type")))
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(typ)))
	body = append(body, typ...)
	return zmtpFrame(0x04, body, false)
}

// validZMTPStream is a greeting, a READY command and several messages of
// short, long, empty and 255/256-byte frames.
func validZMTPStream() []byte {
	var s []byte
	s = append(s, zmtpGreeting()...)
	s = append(s, zmtpReady("PUB")...)
	for seq := range uint64(3) {
		s = append(s, zmtpFrame(0x01, []byte("kv-events"), false)...)
		s = append(s, zmtpFrame(0x01, be64(seq), false)...)
		s = append(s, zmtpFrame(0x00, bytes.Repeat([]byte{byte(seq)}, 300+int(seq)), false)...)
	}
	s = append(s, zmtpFrame(0x01, nil, false)...)                          // empty short frame
	s = append(s, zmtpFrame(0x01, nil, true)...)                           // empty long frame
	s = append(s, zmtpFrame(0x01, bytes.Repeat([]byte{7}, 255), false)...) // largest short frame
	s = append(s, zmtpFrame(0x00, bytes.Repeat([]byte{8}, 256), false)...) // smallest long one
	s = append(s, zmtpFrame(0x00, []byte{0x02, 0x06}, true)...)            // a body that looks like a header
	s = append(s, zmtpFrame(0x04, append([]byte{4}, "PING"...), true)...)  // long command
	return s
}

// feedChunks feeds s to a fresh tracker in the chunks cut at cuts (offsets)
// and returns the offset the tracker failed at (-1: no error), the bytes it
// passed on, and its error.
func feedChunks(t *testing.T, limit uint64, s []byte, cuts []int) (failedAt, passed int, err error) {
	t.Helper()
	tr := zmtpTracker{limit: limit}
	start := 0
	for _, end := range append(cuts, len(s)) {
		k, err := tr.feed(s[start:end])
		if err != nil {
			return end, passed + k, err
		}
		if k != end-start {
			t.Fatalf("feed of %d bytes passed %d on without an error", end-start, k)
		}
		passed += k
		start = end
	}
	if tr.state != zmtpFlags || tr.msg != 0 || tr.greeting != zmtpGreetingLen {
		t.Fatalf("tracker out of step at the end of the stream: %+v", tr)
	}
	return -1, passed, nil
}

func oneByteCuts(n int) []int {
	cuts := make([]int, 0, n)
	for i := 1; i < n; i++ {
		cuts = append(cuts, i)
	}
	return cuts
}

func TestZMTPTrackerValidStreamAnySplit(t *testing.T) {
	s := validZMTPStream()
	for k := 0; k <= len(s); k++ {
		if at, _, err := feedChunks(t, maxZMTPMessage, s, []int{k}); err != nil {
			t.Fatalf("split at %d: error at %d: %v", k, at, err)
		}
	}
	if at, _, err := feedChunks(t, maxZMTPMessage, s, oneByteCuts(len(s))); err != nil {
		t.Fatalf("1-byte reads: error at %d: %v", at, err)
	}
}

func TestZMTPTrackerHugeFrameAnySplit(t *testing.T) {
	s := append(validZMTPStream(), zmtpFrame(0x01, []byte("kv-events"), false)...)
	hdrStart := len(s)
	s = binary.BigEndian.AppendUint64(append(s, 0x02), 1<<62)
	hdrEnd := len(s)
	s = append(s, "body bytes that must never be passed on"...)
	check := func(what string, cuts []int) {
		t.Helper()
		at, passed, err := feedChunks(t, maxZMTPMessage, s, cuts)
		if !errors.Is(err, errZMTPTooLarge) {
			t.Fatalf("%s: err %v, want errZMTPTooLarge", what, err)
		}
		// The read that completed the header fails, passing on only what
		// it held before the header.
		readStart := 0
		for _, c := range cuts {
			if c < hdrEnd {
				readStart = c
			}
		}
		if want := max(readStart, hdrStart); passed != want {
			t.Fatalf("%s: %d bytes passed on, want %d (header at %d..%d)", what, passed, want, hdrStart, hdrEnd)
		}
		if at < hdrEnd {
			t.Fatalf("%s: error at the read ending at %d, before the header's end %d", what, at, hdrEnd)
		}
	}
	for k := 0; k <= len(s); k++ {
		check("split at "+strconv.Itoa(k), []int{k})
	}
	check("1-byte reads", oneByteCuts(len(s)))
}

// The cap is on a message's frames together, and exactly the cap is fine.
func TestZMTPTrackerMessageCap(t *testing.T) {
	const limit = 1000
	base := append(zmtpGreeting(), zmtpReady("PUB")...)
	for _, c := range []struct {
		name   string
		frames [][]byte
		ok     bool
	}{
		{"one frame at the cap", [][]byte{zmtpFrame(0, make([]byte, limit), false)}, true},
		{"one frame over", [][]byte{zmtpFrame(0, make([]byte, limit+1), false)}, false},
		{"frames summing to the cap", [][]byte{zmtpFrame(1, make([]byte, 400), false), zmtpFrame(1, make([]byte, 100), false), zmtpFrame(0, make([]byte, 500), true)}, true},
		{"frames summing over", [][]byte{zmtpFrame(1, make([]byte, 400), false), zmtpFrame(1, make([]byte, 100), false), zmtpFrame(0, make([]byte, 501), true)}, false},
		{"messages each under", [][]byte{zmtpFrame(0, make([]byte, 600), false), zmtpFrame(0, make([]byte, 600), false)}, true},
		{"2^64-1 after some bytes", [][]byte{zmtpFrame(1, make([]byte, 10), false), binary.BigEndian.AppendUint64([]byte{0x02}, 1<<64-1)}, false},
		{"a command under the cap", [][]byte{zmtpFrame(0x04, make([]byte, 255), false)}, true},
		{"a command over the cap", [][]byte{zmtpFrame(0x04, make([]byte, limit+1), true)}, false},
	} {
		s := bytes.Clone(base)
		for _, f := range c.frames {
			s = append(s, f...)
		}
		tr := zmtpTracker{limit: limit}
		_, err := tr.feed(s)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.name, err)
		}
	}
}

// chunkConn is a net.Conn whose Read returns the next chunk.
type chunkConn struct {
	net.Conn
	chunks [][]byte
	closed bool
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

func (c *chunkConn) Close() error { c.closed = true; return nil }

// The conn fails the read of the huge header, closes the connection and
// keeps failing; io.ReadFull of the header (as zmq4 does) sees the error.
func TestZMTPCapConnFailsAndCloses(t *testing.T) {
	pre := append(zmtpGreeting(), zmtpReady("PUB")...)
	hdr := binary.BigEndian.AppendUint64([]byte{0x06}, 1<<62)
	inner := &chunkConn{chunks: [][]byte{pre, hdr[:2], hdr[2:], []byte("more")}}
	c := &zmtpCapConn{Conn: inner, rd: zmtpTracker{limit: maxZMTPMessage}}
	buf := make([]byte, len(pre))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	var h [2]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatal(err)
	}
	var long [7]byte
	if n, err := io.ReadFull(c, long[:]); !errors.Is(err, errZMTPTooLarge) || n != 0 {
		t.Fatalf("read of the long size: %d, %v; want 0, errZMTPTooLarge", n, err)
	}
	if !inner.closed {
		t.Fatal("connection not closed")
	}
	if n, err := c.Read(buf); !errors.Is(err, errZMTPTooLarge) || n != 0 {
		t.Fatalf("later read: %d, %v; want 0, errZMTPTooLarge", n, err)
	}
}

// runInChild runs the test named name in a child process (the parent's
// half returns true after checking the child passed), so that a crash of
// zmq4's reader goroutine fails the test instead of the test binary.
func runInChild(t *testing.T, name string) (parent bool) {
	t.Helper()
	if os.Getenv("KVIDX_ZMTP_CHILD") == name {
		return false
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "KVIDX_ZMTP_CHILD="+name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child process failed (died?): %v\n%.3000s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("child did not run the test:\n%.3000s", out)
	}
	return true
}

// A peer that greets, then declares a 2^62-byte command frame in the
// handshake, used to crash the process in zmq4's makeslice; now the dial
// fails, is counted, and Run returns on cancellation.
func TestZMQHugeFrameInHandshake(t *testing.T) {
	if runInChild(t, "TestZMQHugeFrameInHandshake") {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var greet [64]byte
		io.ReadFull(c, greet[:])
		c.Write(greet[:]) // a valid NULL greeting, then a 2^62-byte command frame header
		c.Write(binary.BigEndian.AppendUint64([]byte{0x06}, 1<<62))
		time.Sleep(5 * time.Second)
	}()
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://" + ln.Addr().String(), WorkerID: 1}, &fakeStore{}, testOptions())
	stop := runUntilCancelled(t, t.Context(), src)
	waitFor(t, "the failed dial counted", func() bool { return src.Stats().Errors[ReasonConnect] > 0 })
	stop()
	if s := src.Stats(); s.Errors[ReasonConnect] == 0 {
		t.Fatalf("stats %+v: want the failed dial counted", s)
	}
}

// A publisher that completes the handshake and sends a good message, then
// declares an 8 GiB message frame: the connection is dropped (counted as a
// disconnect) before zmq4 allocates it, and the source redials.
func TestZMQHugeFrameAfterHandshake(t *testing.T) {
	if runInChild(t, "TestZMQHugeFrameAfterHandshake") {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 10)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	defer close(done)
	wg.Go(func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			if !first {
				c.Close()
				continue
			}
			wg.Go(func() {
				defer c.Close()
				var greet [64]byte
				if _, err := io.ReadFull(c, greet[:]); err != nil {
					return
				}
				g := zmtpGreeting()
				c.Write(g)
				c.Write(zmtpReady("PUB"))
				go io.Copy(io.Discard, c) // the SUB's READY and subscription
				time.Sleep(100 * time.Millisecond)
				var m []byte
				m = append(m, zmtpFrame(0x01, []byte("kv"), false)...)
				m = append(m, zmtpFrame(0x01, be64(0), false)...)
				m = append(m, zmtpFrame(0x00, batchPayload(0), false)...)
				c.Write(m)
				time.Sleep(100 * time.Millisecond)
				c.Write(binary.BigEndian.AppendUint64([]byte{0x03}, 8<<30))
				c.Write(make([]byte, 4096))
				<-done // holds the connection: only the guard can drop it
			})
		}
	})
	st := &fakeStore{}
	src := NewZMQSource(ZMQSpec{Endpoint: "tcp://" + ln.Addr().String(), WorkerID: 1}, st, testOptions())
	stop := runUntilCancelled(t, t.Context(), src)
	waitChan(t, "the first connection", accepted, 5*time.Second)
	waitChan(t, "a redial after the huge frame", accepted, 3*time.Second)
	stop()
	s := src.Stats()
	if s.Errors[ReasonDisconnect] == 0 {
		t.Fatalf("stats %+v: want the dropped connection counted", s)
	}
	checkSeqs(t, st, []uint64{0})
}
