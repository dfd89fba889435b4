package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvidx/kvidx/internal/logbuf"
)

// silentPeer accepts TCP connections on loopback and never sends a byte:
// no ZMTP greeting. It reports each accepted connection on accepted and
// whether the source closed it again (read returns EOF) on closed.
type silentPeer struct {
	ln       net.Listener
	accepted chan struct{}
	closed   chan struct{}
	wg       sync.WaitGroup
}

func newSilentPeer(t *testing.T) *silentPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentPeer{ln: ln, accepted: make(chan struct{}, 100), closed: make(chan struct{}, 100)}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		p.wg.Wait()
	})
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case p.accepted <- struct{}{}:
			default:
			}
			p.wg.Go(func() {
				// Read what the source sends (its greeting) until it hangs up.
				_, err := io.Copy(io.Discard, c)
				if err == nil || errors.Is(err, io.EOF) {
					select {
					case p.closed <- struct{}{}:
					default:
					}
				}
			})
		}
	})
	return p
}

func (p *silentPeer) endpoint() string { return "tcp://" + p.ln.Addr().String() }

// runUntilCancelled starts src.Run under ctx and returns a function that
// cancels it and fails the test unless Run returns within 10 s (a source
// stuck in a ZMTP handshake never would).
func runUntilCancelled(t *testing.T, ctx context.Context, src *ZMQSource) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run still running 10s after cancel")
		}
	}
}

func waitChan(t *testing.T, what string, c <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// A publisher, or a replay endpoint, that accepts the TCP connection but
// never greets must not keep Run from returning on cancellation (with a
// dial timeout far away). The first replay runs before anything else.
func TestZMQRunReturnsWhenPeerNeverGreets(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprint("replay=", replay), func(t *testing.T) {
			peer := newSilentPeer(t)
			spec := ZMQSpec{Endpoint: peer.endpoint(), WorkerID: 1}
			if replay {
				spec.Endpoint, spec.Replay = newSilentPeer(t).endpoint(), peer.endpoint()
			}
			opts := testOptions()
			opts.DialTimeout = time.Minute
			stop := runUntilCancelled(t, t.Context(), NewZMQSource(spec, &fakeStore{}, opts))
			waitChan(t, "the connection", peer.accepted, 5*time.Second)
			time.Sleep(100 * time.Millisecond)
			stop()
			waitChan(t, "the abandoned connection closed", peer.closed, 3*time.Second)
		})
	}
}

// A handshake that does not finish within DialTimeout is a failed attempt:
// counted, its connection closed, and the source dials again.
func TestZMQHandshakeTimeoutRedials(t *testing.T) {
	peer := newSilentPeer(t)
	opts := testOptions()
	opts.DialTimeout = 200 * time.Millisecond
	src := NewZMQSource(ZMQSpec{Endpoint: peer.endpoint(), WorkerID: 1}, &fakeStore{}, opts)
	stop := runUntilCancelled(t, t.Context(), src)
	defer stop()
	waitChan(t, "the first connection", peer.accepted, 5*time.Second)
	waitChan(t, "the first connection closed after the handshake timeout", peer.closed, 5*time.Second)
	waitChan(t, "a second connection", peer.accepted, 5*time.Second)
	if s := src.Stats(); s.Errors[ReasonConnect] == 0 || s.Connected {
		t.Fatalf("stats %+v: want a connect error counted, not connected", s)
	}
}

// A replay endpoint that never greets fails the replay after DialTimeout;
// the live batches are then applied.
func TestZMQReplayHandshakeTimeout(t *testing.T) {
	ctx := t.Context()
	e := newFakeEngine(t, ctx)
	peer := newSilentPeer(t)
	opts := testOptions()
	opts.DialTimeout = 200 * time.Millisecond
	st := &fakeStore{}
	src := NewZMQSource(ZMQSpec{Endpoint: e.pubEP, WorkerID: 7, Replay: peer.endpoint()}, st, opts)
	runSource(t, ctx, src)
	publishUntilApplied(t, e, st, 0)
	if s := src.Stats(); s.Errors[ReasonReplay] == 0 {
		t.Fatalf("stats %+v: want the replay failure counted", s)
	}
}

// A failed dial is logged naming the endpoint as the operator gave it, as
// /readyz does, never the source's internal transport scheme.
func TestZMQConnectErrorLogNamesEndpointAsGiven(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "tcp://" + ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	var logs logbuf.Buffer
	opts := testOptions()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	src := NewZMQSource(ZMQSpec{Endpoint: endpoint, WorkerID: 1}, &fakeStore{}, opts)
	stop := runUntilCancelled(t, t.Context(), src)
	waitFor(t, "a connect error logged", func() bool { return strings.Contains(logs.String(), "reason=connect") })
	stop()
	if out := logs.String(); strings.Contains(out, guardedScheme) || !strings.Contains(out, endpoint) {
		t.Fatalf("log names the transport %q, or not the endpoint %s:\n%s", guardedScheme, endpoint, out)
	}
	if e := src.Stats().LastConnError; strings.Contains(e, guardedScheme) {
		t.Fatalf("LastConnError %q names the transport", e)
	}
}
