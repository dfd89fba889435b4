package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// /readyz says why a source is not connected, not only that it is not: the
// operator sees the refused connection without reading the log.
func TestReadyzSaysWhySourceNotConnected(t *testing.T) {
	// A loopback port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := serveListening(t, ctx, "--data-dir", t.TempDir(), "--sync", "none",
		"--nats-url", "nats://"+addr, "--zmq", "tcp://"+addr+"=7")
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("readyz %d %s: want 503", resp.StatusCode, b)
		}
		body = string(b)
		if strings.Contains(body, "source nats:KV_EVENTS: not connected: connecting to nats://"+addr) &&
			strings.Contains(body, "source zmq:tcp://"+addr+": not connected: ") && strings.Contains(body, "connection refused") {
			break
		}
	}
	if !strings.Contains(body, "source nats:KV_EVENTS: not connected: connecting to nats://"+addr) ||
		!strings.Contains(body, "source zmq:tcp://"+addr+": not connected: ") || !strings.Contains(body, "connection refused") {
		t.Fatalf("readyz %s: want each source's reason", body)
	}
	if strings.Contains(body, "kvidx-guarded") {
		t.Errorf("readyz %s names the internal transport", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
