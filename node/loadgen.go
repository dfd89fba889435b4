package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/workload"
)

// LoadReport is what [LoadGen] measured.
type LoadReport struct {
	Concurrency int           `json:"concurrency"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	// Exhausted tells whether every pre-generated request was sent before
	// the duration ran out.
	Exhausted bool `json:"exhausted"`
	// Requests, Matches, EventPosts, Events and BlockOps count what was
	// sent and acknowledged; Rejected counts events the server rejected;
	// Retries counts 503 overload answers retried.
	Requests, Matches, EventPosts, Events, BlockOps, Rejected, Retries int
	EventsPerSec, BlockOpsPerSec, MatchesPerSec                        float64
	MatchP50, MatchP99, EventsP50, EventsP99                           time.Duration
	// LagP50 and LagP99: from a request's match answer to its events'
	// acknowledgement.
	LagP50, LagP99 time.Duration
}

// String formats the report on a few lines.
func (r LoadReport) String() string {
	return fmt.Sprintf("concurrency %d, %v, %d requests (exhausted: %v)\n"+
		"events:  %d in %d posts, %.0f events/s, %.0f block ops/s, post p50 %v p99 %v, %d rejected, %d overload retries\n"+
		"         acknowledged after their match: p50 %v p99 %v\n"+
		"matches: %d, %.0f/s, p50 %v p99 %v",
		r.Concurrency, r.Elapsed.Round(time.Millisecond), r.Requests, r.Exhausted,
		r.Events, r.EventPosts, r.EventsPerSec, r.BlockOpsPerSec, r.EventsP50, r.EventsP99, r.Rejected, r.Retries,
		r.LagP50, r.LagP99,
		r.Matches, r.MatchesPerSec, r.MatchP50, r.MatchP99)
}

// loadRequest is one pre-encoded workload request.
type loadRequest struct {
	match    []byte // POST /v1/match body
	events   []byte // POST /v1/events body (NDJSON); nil when none
	nEvents  int
	blockOps int
}

// LoadGen drives the kvidx server at target (e.g. "http://127.0.0.1:8080")
// with the workload of trace under cfg: it pre-generates every request's
// (local hashes, events) with [workload.Generate], then replays them with
// concurrency clients for at most duration.
//
// Client c owns the workers w with w % concurrency == c and walks their
// requests in workload order: POST /v1/match with the request's local
// hashes, then its events go to the client's queue. The client's poster
// sends everything queued as one POST /v1/events (NDJSON) as soon as its
// previous post is acknowledged, the way a worker's event publisher batches
// while the log syncs; so each worker's events arrive in order and trail
// their matches by about one commit. The queue holds at most maxQueued
// requests: a client whose events are not acknowledged stops matching.
//
// The run ends when duration passes or the requests run out (queued events
// are still posted); ctx cancels it. The server should start empty: replayed
// events assume the workload's cache state. A 503 overload answer is
// retried after a short pause; any other failure stops the run with an
// error naming the request. progress, if not nil, is called once a second
// during generation and the run, with requests matched of those generated.
func LoadGen(ctx context.Context, target string, trace *workload.Trace, cfg workload.Config, concurrency int, duration time.Duration, progress workload.ProgressFunc) (LoadReport, error) {
	if concurrency < 1 {
		return LoadReport{}, fmt.Errorf("loadgen: concurrency must be >= 1, got %d", concurrency)
	}
	if duration <= 0 {
		return LoadReport{}, fmt.Errorf("loadgen: duration must be positive, got %v", duration)
	}
	addr, host, err := loadTarget(target)
	if err != nil {
		return LoadReport{}, fmt.Errorf("loadgen: %w", err)
	}
	// Fail before generating the workload when nothing listens there.
	probe, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return LoadReport{}, fmt.Errorf("loadgen: no server at %s: %w", target, err)
	}
	probe.Close()
	perClient := make([][]loadRequest, concurrency)
	total := 0
	var buf []byte
	err = workload.Generate(ctx, trace, cfg, func(req workload.Request, events []engine.Event) error {
		lr := loadRequest{nEvents: len(events), blockOps: workload.BlockOps(events)}
		lr.match = appendMatchBody(nil, req.TokensHashes)
		if len(events) > 0 {
			buf = buf[:0]
			for i := range events {
				buf = eventjson.AppendEvent(buf, &events[i])
				buf = append(buf, '\n')
			}
			lr.events = slices.Clone(buf)
		}
		c := int(req.Worker.WorkerID % uint64(concurrency))
		perClient[c] = append(perClient[c], lr)
		total++
		return nil
	})
	if err != nil {
		return LoadReport{}, fmt.Errorf("loadgen: generating the workload: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]clientResult, concurrency)
	var wg sync.WaitGroup
	var matched atomic.Int64
	start := time.Now()
	stop := start.Add(duration)
	for c := range concurrency {
		wg.Go(func() {
			results[c] = runClient(ctx, addr, host, perClient[c], stop, &matched)
			if results[c].err != nil {
				cancel()
			}
		})
	}
	if progress != nil {
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		tick := time.NewTicker(time.Second)
	wait:
		for {
			select {
			case <-finished:
				break wait
			case <-tick.C:
				progress(int(matched.Load()), total, time.Since(start))
			}
		}
		tick.Stop()
	}
	wg.Wait()
	elapsed := time.Since(start)

	rep := LoadReport{Concurrency: concurrency, Elapsed: elapsed, Exhausted: true}
	var matchLat, eventLat, lag []time.Duration
	var errs []error
	for c, r := range results {
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			errs = append(errs, fmt.Errorf("client %d: %w", c, r.err))
		}
		rep.Requests += r.requests
		rep.Matches += len(r.matchLat)
		rep.EventPosts += len(r.eventLat)
		rep.Events += r.events
		rep.BlockOps += r.blockOps
		rep.Rejected += r.rejected
		rep.Retries += r.retries
		if r.requests < len(perClient[c]) {
			rep.Exhausted = false
		}
		matchLat = append(matchLat, r.matchLat...)
		eventLat = append(eventLat, r.eventLat...)
		lag = append(lag, r.lag...)
	}
	secs := elapsed.Seconds()
	rep.EventsPerSec = float64(rep.Events) / secs
	rep.BlockOpsPerSec = float64(rep.BlockOps) / secs
	rep.MatchesPerSec = float64(rep.Matches) / secs
	rep.MatchP50, rep.MatchP99 = percentiles(matchLat)
	rep.EventsP50, rep.EventsP99 = percentiles(eventLat)
	rep.LagP50, rep.LagP99 = percentiles(lag)
	switch len(errs) {
	case 0:
		return rep, nil
	case 1:
		return rep, errs[0]
	}
	// Clients usually fail alike (the server went away): one is enough.
	return rep, fmt.Errorf("%w (and %d more clients failed)", errs[0], len(errs)-1)
}

// maxQueued bounds the requests whose events a client holds unacknowledged,
// and maxPostBytes one event post's body (well under the server's limit).
const (
	maxQueued    = 64
	maxPostBytes = 1 << 20
)

func appendMatchBody(dst []byte, hashes []uint64) []byte {
	dst = append(dst, `{"local_hashes":[`...)
	for i, h := range hashes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, h, 10)
	}
	return append(dst, "]}"...)
}

type clientResult struct {
	requests, events, blockOps, rejected, retries int
	matchLat, eventLat, lag                       []time.Duration
	err                                           error
}

// queued is one request whose events wait for the poster.
type queued struct {
	req int
	at  time.Time // when its match was answered
}

// runClient matches reqs in order on one connection and posts their events
// on another (see [LoadGen]).
func runClient(ctx context.Context, addr, host string, reqs []loadRequest, stop time.Time, matched *atomic.Int64) clientResult {
	queue := make(chan queued, maxQueued)
	var res clientResult
	var posted clientResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		posted = postEvents(ctx, newLoadConn(addr, host), reqs, queue)
	}()
	res = matchRequests(ctx, newLoadConn(addr, host), reqs, queue, stop, matched)
	close(queue)
	<-done
	res.events, res.blockOps, res.rejected, res.retries = posted.events, posted.blockOps, posted.rejected, posted.retries
	res.eventLat, res.lag = posted.eventLat, posted.lag
	if res.err == nil {
		res.err = posted.err
	}
	return res
}

func matchRequests(ctx context.Context, conn *loadConn, reqs []loadRequest, queue chan<- queued, stop time.Time, matched *atomic.Int64) (res clientResult) {
	defer conn.close()
	for i, lr := range reqs {
		if time.Now().After(stop) || ctx.Err() != nil {
			return res
		}
		t0 := time.Now()
		a, err := conn.post("/v1/match", lr.match)
		if err == nil && a.status != http.StatusOK {
			err = fmt.Errorf("status %d: %s", a.status, bytes.TrimSpace(a.body))
		}
		if err != nil {
			res.err = fmt.Errorf("request %d: match: %w", i, err)
			return res
		}
		now := time.Now()
		res.matchLat = append(res.matchLat, now.Sub(t0))
		if lr.events != nil {
			select {
			case queue <- queued{req: i, at: now}:
			case <-ctx.Done():
				return res
			}
		}
		res.requests++
		matched.Add(1)
	}
	return res
}

// postEvents sends the queued requests' events until the queue closes,
// each post carrying everything queued since the last one.
func postEvents(ctx context.Context, conn *loadConn, reqs []loadRequest, queue <-chan queued) (res clientResult) {
	defer conn.close()
	var body []byte
	batch := make([]queued, 0, maxQueued)
	for {
		q, ok := <-queue
		if !ok {
			return res
		}
		batch = append(batch[:0], q)
		body = append(body[:0], reqs[q.req].events...)
	drain:
		for len(body) < maxPostBytes {
			select {
			case q, ok := <-queue:
				if !ok {
					break drain
				}
				batch = append(batch, q)
				body = append(body, reqs[q.req].events...)
			default:
				break drain
			}
		}
		for {
			if ctx.Err() != nil {
				return res
			}
			t0 := time.Now()
			a, err := conn.post("/v1/events", body)
			if err == nil && a.status == http.StatusServiceUnavailable && a.retryAfter {
				res.retries++
				select {
				case <-ctx.Done():
					return res
				case <-time.After(5 * time.Millisecond):
				}
				continue
			}
			if err == nil && a.status != http.StatusOK {
				err = fmt.Errorf("status %d: %s", a.status, bytes.TrimSpace(a.body))
			}
			if err != nil {
				res.err = fmt.Errorf("events of requests %d..%d: %w", batch[0].req, batch[len(batch)-1].req, err)
				return res
			}
			now := time.Now()
			res.eventLat = append(res.eventLat, now.Sub(t0))
			res.rejected += bytes.Count(a.body, []byte(`{"index":`))
			break
		}
		now := time.Now()
		for _, q := range batch {
			res.lag = append(res.lag, now.Sub(q.at))
			res.events += reqs[q.req].nEvents
			res.blockOps += reqs[q.req].blockOps
		}
	}
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return at(0.50), at(0.99)
}
