package workload

import (
	"context"
	"fmt"

	"github.com/kvidx/kvidx/engine"
)

// EventFunc receives one request, routed (Worker and Matched set), and the
// events its worker emitted for it, already applied to the index. req's
// slices and events are reused after fn returns: copy what must outlive the
// call ([CloneEvents]). A non-nil error stops the run and is returned as is.
type EventFunc func(req Request, events []engine.Event) error

// Generate replays the workload of tr under cfg, routing with a fresh
// [engine.Index], and calls fn once per request with its events, in order.
// It is [Run] with engine.New().
func Generate(ctx context.Context, tr *Trace, cfg Config, fn EventFunc) error {
	return Run(ctx, engine.New(), tr, cfg, fn)
}

// Run replays the workload of tr under cfg: for each request it scores the
// fleet with ix.Match, routes ([Simulator.Route]), serves it
// ([Simulator.Serve]), applies the events to ix, then calls fn (which may be
// nil). ix should start empty of workers 0..W-1; at the end it holds the
// fleet's final cache state. Run returns ctx's error if ctx is cancelled, and
// fails if the index rejects an event (a bug in the simulator or the engine).
func Run(ctx context.Context, ix *engine.Index, tr *Trace, cfg Config, fn EventFunc) error {
	if err := cfg.validateFor(tr); err != nil {
		return err
	}
	sim, err := NewSimulator(cfg)
	if err != nil {
		return err
	}
	for req := range Requests(tr, cfg.Duplicate) {
		if req.Seq%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		w, m := sim.Route(req.Blocks(), ix.Match(req.TokensHashes, nil))
		req.Worker, req.Matched = engine.WorkerKey{WorkerID: uint64(w)}, m
		events := sim.Serve(w, req)
		if err := applyAll(ix, req, events); err != nil {
			return err
		}
		if fn != nil {
			if err := fn(*req, events); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// applyAll applies a request's events to ix.
func applyAll(ix *engine.Index, req *Request, events []engine.Event) error {
	for i := range events {
		if err := ix.Apply(&events[i]); err != nil {
			return applyError(req, &events[i], err)
		}
	}
	return nil
}

func applyError(req *Request, ev *engine.Event, err error) error {
	return fmt.Errorf("workload: request %d (record %d copy %d) worker %v: %v event %d: %w",
		req.Seq, req.Record, req.Copy, ev.Worker, ev.Kind, ev.EventID, err)
}
