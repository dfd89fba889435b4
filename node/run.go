package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
)

// Run serves the API on ln until ctx is cancelled, running the periodic
// snapshot loop alongside. On cancellation it stops accepting connections,
// waits for in-flight requests (at most ShutdownTimeout), stops the loop and,
// if FinalSnapshot is set and the index changed since the last snapshot,
// takes a final one. The caller closes the store afterwards. Run returns nil
// after a clean shutdown, else what failed (serving, draining or the final
// snapshot).
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	var wg sync.WaitGroup
	wg.Go(func() { s.snaps.loop(loopCtx) })

	s.log.Info("serving", "addr", ln.Addr().String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	var errs []error
	select {
	case err := <-serveErr:
		errs = append(errs, fmt.Errorf("serving on %s: %w", ln.Addr(), err))
	case <-ctx.Done():
		s.log.Info("shutting down: draining in-flight requests", "timeout", s.cfg.ShutdownTimeout)
		shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		err := hs.Shutdown(shCtx)
		cancel()
		if err != nil {
			_ = hs.Close()
			errs = append(errs, fmt.Errorf("draining requests on %s: %w", ln.Addr(), err))
		}
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("serving on %s: %w", ln.Addr(), err))
		}
	}
	stopLoop()
	wg.Wait()
	if s.cfg.FinalSnapshot && s.snaps.changed() {
		if _, _, err := s.snaps.take(context.WithoutCancel(ctx), "shutdown"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
