package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/kvidx/kvidx/recovery"
)

// Run serves the API on ln until ctx is cancelled, running the periodic
// snapshot loop alongside. On cancellation it ends the context of the loops
// started with GoSource, stops accepting connections and waits for
// in-flight requests (at most ShutdownTimeout) while those loops stop, then
// waits for them, stops the snapshot loop and, if FinalSnapshot is set and
// the index changed since the last snapshot, takes a final one. The caller
// closes the store afterwards. Run returns nil after a clean shutdown, else
// what failed (serving, draining with event batches still in the store's
// Append, or the final snapshot). A drain that times out only on requests
// not yet received whole (a stalled client) is logged, not a failure.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	fs := s.fastServer()
	ln = retryListener{ln, s.log}
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	var wg sync.WaitGroup
	wg.Go(func() { s.snaps.loop(loopCtx) })

	s.log.Info("serving", "addr", ln.Addr().String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- fs.Serve(ln) }()

	var errs []error
	select {
	case err := <-serveErr:
		if err == nil {
			err = errors.New("the listener was closed")
		}
		errs = append(errs, fmt.Errorf("serving on %s: %w", ln.Addr(), err))
		// Connections accepted before the listener failed would go on
		// being served after Run returns, against a store the caller is
		// about to close: drain them as a shutdown does.
		shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		if err := fs.ShutdownWithContext(shCtx); err != nil {
			errs = append(errs, fmt.Errorf("draining requests on %s: %w", ln.Addr(), err))
		}
		cancel()
		s.draining.Store(true)
	case <-ctx.Done():
		if s.store.Load() != nil {
			s.log.Info("shutting down: draining in-flight requests", "timeout", s.cfg.ShutdownTimeout)
		} else {
			// Recovery ended without a store (it failed, or was
			// interrupted): only health checks were served.
			s.log.Info("stopping the health endpoints: no store was set")
		}
		s.sources.cancel() // they stop while the requests drain
		shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		err := fs.ShutdownWithContext(shCtx)
		cancel()
		// From here on nothing new is served, even on connections a timed
		// out drain left open.
		s.draining.Store(true)
		switch n := s.appending.Load(); {
		case err != nil && n > 0:
			errs = append(errs, fmt.Errorf("draining requests on %s: %d event batches still in the WAL: %w", ln.Addr(), n, err))
		case err != nil:
			// Only requests whose bodies had not arrived whole were left
			// (a slow or stalled client): none can have been acknowledged,
			// so the shutdown is still clean.
			s.log.Warn("shutting down: the drain timed out on requests not received whole; they are dropped unanswered", "timeout", s.cfg.ShutdownTimeout)
		}
		// Shutdown does not see a listener Serve has not registered yet
		// (a cancellation right after start): closing it ends Serve anyway.
		_ = ln.Close()
		<-serveErr // the listener is closed: Serve's error says only that
	}
	// Nothing appends after this: the final snapshot covers everything.
	s.sources.stop()
	stopLoop()
	wg.Wait()
	if s.cfg.FinalSnapshot && s.snaps.changed() {
		_, _, err := s.snaps.take(context.WithoutCancel(ctx), "shutdown")
		switch {
		case errors.Is(err, recovery.ErrNoSpace):
			// A stop while the disk is nearly full is still clean:
			// everything acknowledged is in the WAL, which the next
			// start replays instead.
			s.log.Warn("shutting down without a final snapshot: no room for it; the next start replays the WAL after the last one", "err", err)
		case err != nil:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// retryListener retries an Accept that failed for want of a resource (file
// descriptors, kernel buffers, memory) or because the client gave up first,
// after a pause doubling from 5 ms to 1 s, as net/http's Server does.
// fasthttp takes any such error as permanent and ends Serve: a client that
// opened connections until the process ran out of file descriptors ("accept4:
// too many open files") stopped the node. Meanwhile the connections already
// open are served, and idle ones end by the read or idle timeout.
type retryListener struct {
	net.Listener
	log *slog.Logger
}

func (l retryListener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil || !retryableAccept(err) {
			return c, err
		}
		pause = min(max(2*pause, 5*time.Millisecond), time.Second)
		l.log.Warn("accepting a connection failed; retrying", "err", err, "pause", pause)
		time.Sleep(pause)
	}
}

// retryableAccept tells an Accept error that passes with time from one
// that ends the listener (closed, or broken).
func retryableAccept(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
