package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A second SIGTERM stops a shutdown that is taking its time (here a drain
// held up by a client that never sends its declared body) at once: the
// first one started it, the operator now wants out.
func TestServeSecondSignalStopsAtOnce(t *testing.T) {
	if os.Getenv("KVIDX_SERVE_CHILD") != "" {
		t.Skip("running as the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$")
	cmd.Env = append(os.Environ(), "KVIDX_SERVE_CHILD="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var base string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := servingAddr.FindStringSubmatch(sc.Text()); m != nil {
			base = m[1]
			break
		}
	}
	if base == "" {
		t.Fatal("child stopped before listening")
	}
	// serve logs this once the first signal has begun the shutdown and
	// signals take their default action again.
	armed := make(chan struct{})
	go func() {
		for sc.Scan() {
			if strings.Contains(sc.Text(), "a second SIGTERM or SIGINT stops at once") {
				close(armed)
				break
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	waitReady(t, "http://"+base)
	// An in-flight request the drain waits for (up to its 30 s timeout).
	// Its 100 Continue tells that the server is reading it: the drain does
	// not wait for a connection still in the listener's backlog when the
	// shutdown closes the listener.
	conn, err := net.Dial("tcp", base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /v1/events HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, " 100 ") {
		t.Fatalf("waiting for 100 Continue: %q, %v", line, err)
	}
	if _, err := conn.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Fatalf("exited before the drain ended: %v", err)
	case <-armed:
	case <-time.After(20 * time.Second):
		t.Fatal("the first SIGTERM did not begin the shutdown")
	}
	select {
	case err := <-exited:
		t.Fatalf("exited before the drain ended: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(err.Error(), "signal") && !strings.Contains(err.Error(), "exit status") {
			t.Fatalf("after a second SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second SIGTERM did not stop the shutdown (the drain waits up to 30 s)")
	}
}
