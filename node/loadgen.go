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
	Posters     int           `json:"posters"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	// Exhausted tells whether every pre-generated request was sent before
	// the duration ran out.
	Exhausted bool `json:"exhausted"`
	// Requests, Matches, EventPosts, Events and BlockOps count what was
	// sent and acknowledged; Rejected counts events the server rejected;
	// Retries counts 503 overload answers retried.
	Requests   int `json:"requests"`
	Matches    int `json:"matches"`
	EventPosts int `json:"event_posts"`
	Events     int `json:"events"`
	BlockOps   int `json:"block_ops"`
	Rejected   int `json:"rejected"`
	Retries    int `json:"retries"`

	EventsPerSec   float64 `json:"events_per_s"`
	BlockOpsPerSec float64 `json:"block_ops_per_s"`
	MatchesPerSec  float64 `json:"matches_per_s"`

	MatchP50  time.Duration `json:"match_p50_ns"`
	MatchP99  time.Duration `json:"match_p99_ns"`
	EventsP50 time.Duration `json:"events_p50_ns"`
	EventsP99 time.Duration `json:"events_p99_ns"`
	// LagP50 and LagP99: from a request's match answer to its events'
	// acknowledgement.
	LagP50 time.Duration `json:"lag_p50_ns"`
	LagP99 time.Duration `json:"lag_p99_ns"`
}

// String formats the report on a few lines.
func (r LoadReport) String() string {
	return fmt.Sprintf("concurrency %d, %d event posters, %v, %d requests (exhausted: %v)\n"+
		"events:  %d in %d posts, %.0f events/s, %.0f block ops/s, post p50 %v p99 %v, %d rejected, %d overload retries\n"+
		"         acknowledged after their match: p50 %v p99 %v\n"+
		"matches: %d, %.0f/s, p50 %v p99 %v",
		r.Concurrency, r.Posters, r.Elapsed.Round(time.Millisecond), r.Requests, r.Exhausted,
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

// LoadOptions shape a [LoadGen] run.
type LoadOptions struct {
	// Concurrency is the number of match clients; default 16.
	Concurrency int
	// Posters is the number of event posters; default 4 (at most
	// Concurrency). Fewer posters send bigger batches: on 2 cores 4 beat 16
	// in both throughput and event lag.
	Posters int
	// Duration bounds the run; default 30s.
	Duration time.Duration
	// EndGrace is how long a post may take once Duration has passed,
	// counted from the end of Duration for a post in flight then, from its
	// start for the later ones (the queued events are posted after the
	// end); default 10s. A server that stops answering fails the run so.
	EndGrace time.Duration
	// Progress, if not nil, is called once a second during the run with
	// the requests matched so far and in all.
	Progress workload.ProgressFunc
	// GenerateProgress, if not nil, is called once a second while the
	// workload is generated (before the run) with the requests generated
	// so far and in all.
	GenerateProgress workload.ProgressFunc
}

func (o LoadOptions) withDefaults() (LoadOptions, error) {
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.Posters == 0 {
		o.Posters = min(4, max(1, o.Concurrency))
	}
	if o.Duration == 0 {
		o.Duration = 30 * time.Second
	}
	if o.EndGrace == 0 {
		o.EndGrace = 10 * time.Second
	}
	switch {
	case o.Concurrency < 1:
		return o, fmt.Errorf("concurrency must be >= 1, got %d", o.Concurrency)
	case o.Posters < 1 || o.Posters > o.Concurrency:
		return o, fmt.Errorf("posters must be between 1 and the concurrency (%d), got %d", o.Concurrency, o.Posters)
	case o.Duration < 0:
		return o, fmt.Errorf("duration must be positive, got %v", o.Duration)
	}
	return o, nil
}

// LoadGen drives the kvidx server at target (e.g. "http://127.0.0.1:8080")
// with the workload of trace under cfg: it pre-generates every request's
// (local hashes, events) with [workload.Generate], then replays them.
//
// Match client c owns the workers w with w % Concurrency == c and walks
// their requests in workload order: POST /v1/match with the request's local
// hashes, then its events go to the queue of poster c % Posters. A poster
// sends everything queued as one POST /v1/events (NDJSON) as soon as its
// previous post is acknowledged, the way an event collector batches while
// the log syncs; so each worker's events arrive in order and trail their
// matches by about one commit. A poster's queue holds at most maxQueued
// requests per client it serves: clients whose events are not acknowledged
// stop matching.
//
// The run ends when the duration passes or the requests run out (queued
// events are still posted); ctx cancels it. The server should start empty:
// replayed events assume the workload's cache state. A 503 overload answer
// is retried after a short pause; any other failure stops the run with an
// error naming the request.
func LoadGen(ctx context.Context, target string, trace *workload.Trace, cfg workload.Config, opts LoadOptions) (LoadReport, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return LoadReport{}, fmt.Errorf("loadgen: %w", err)
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
	perClient := make([][]loadRequest, opts.Concurrency)
	total := 0
	var buf []byte
	genStart, genTick := time.Now(), time.Now()
	genTotal := workload.NumRequests(trace, cfg.Duplicate)
	err = workload.Generate(ctx, trace, cfg, func(req workload.Request, events []engine.Event) error {
		if opts.GenerateProgress != nil && total&1023 == 0 && time.Since(genTick) >= time.Second {
			genTick = time.Now()
			opts.GenerateProgress(total, genTotal, genTick.Sub(genStart))
		}
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
		c := int(req.Worker.WorkerID % uint64(opts.Concurrency))
		perClient[c] = append(perClient[c], lr)
		total++
		return nil
	})
	if err != nil {
		return LoadReport{}, fmt.Errorf("loadgen: generating the workload: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	matchers := make([]clientResult, opts.Concurrency)
	posters := make([]clientResult, opts.Posters)
	queues := make([]chan queued, opts.Posters)
	feeding := make([]sync.WaitGroup, opts.Posters) // matchers feeding each poster
	var wg sync.WaitGroup
	var matched atomic.Int64
	start := time.Now()
	stop := start.Add(opts.Duration)
	for p := range opts.Posters {
		clients := (opts.Concurrency - p + opts.Posters - 1) / opts.Posters
		queues[p] = make(chan queued, maxQueued*clients)
		feeding[p].Add(clients)
		wg.Go(func() {
			posters[p] = postEvents(ctx, newLoadConn(addr, host, stop, opts.EndGrace), queues[p])
			if posters[p].err != nil {
				cancel()
			}
		})
		go func() { feeding[p].Wait(); close(queues[p]) }()
	}
	for c := range opts.Concurrency {
		p := c % opts.Posters
		wg.Go(func() {
			defer feeding[p].Done()
			matchers[c] = matchRequests(ctx, c, newLoadConn(addr, host, stop, opts.EndGrace), perClient[c], queues[p], stop, &matched)
			if matchers[c].err != nil {
				cancel()
			}
		})
	}
	if opts.Progress != nil {
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		tick := time.NewTicker(time.Second)
	wait:
		for {
			select {
			case <-finished:
				break wait
			case <-tick.C:
				opts.Progress(int(matched.Load()), total, time.Since(start))
			}
		}
		tick.Stop()
	}
	wg.Wait()
	elapsed := time.Since(start)

	rep := LoadReport{Concurrency: opts.Concurrency, Posters: opts.Posters, Elapsed: elapsed, Exhausted: true}
	var matchLat, eventLat, lag []time.Duration
	var errs []error
	for c, r := range matchers {
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			errs = append(errs, fmt.Errorf("client %d: %w", c, r.err))
		}
		rep.Requests += r.requests
		rep.Matches += len(r.matchLat)
		if r.requests < len(perClient[c]) {
			rep.Exhausted = false
		}
		matchLat = append(matchLat, r.matchLat...)
	}
	for p, r := range posters {
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			errs = append(errs, fmt.Errorf("poster %d: %w", p, r.err))
		}
		rep.EventPosts += len(r.eventLat)
		rep.Events += r.events
		rep.BlockOps += r.blockOps
		rep.Rejected += r.rejected
		rep.Retries += r.retries
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
	return rep, fmt.Errorf("%w (and %d more failed)", errs[0], len(errs)-1)
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

// queued is one request whose events wait for a poster.
type queued struct {
	req    *loadRequest
	client int       // the match client that queued it
	i      int       // its index among the client's requests
	at     time.Time // when its match was answered
}

func matchRequests(ctx context.Context, client int, conn *loadConn, reqs []loadRequest, queue chan<- queued, stop time.Time, matched *atomic.Int64) (res clientResult) {
	defer conn.close()
	for i := range reqs {
		lr := &reqs[i]
		if time.Now().After(stop) || ctx.Err() != nil {
			return res
		}
		t0 := time.Now()
		a, err := conn.post("/v1/match", lr.match)
		if err == nil && a.status != http.StatusOK {
			err = statusError(a)
		}
		if err != nil {
			res.err = fmt.Errorf("request %d: match: %w", i, err)
			return res
		}
		now := time.Now()
		res.matchLat = append(res.matchLat, now.Sub(t0))
		if lr.events != nil {
			select {
			case queue <- queued{req: lr, client: client, i: i, at: now}:
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
func postEvents(ctx context.Context, conn *loadConn, queue <-chan queued) (res clientResult) {
	defer conn.close()
	var body []byte
	batch := make([]queued, 0, maxQueued)
	for {
		q, ok := <-queue
		if !ok {
			return res
		}
		batch = append(batch[:0], q)
		body = append(body[:0], q.req.events...)
	drain:
		for len(body) < maxPostBytes {
			select {
			case q, ok := <-queue:
				if !ok {
					break drain
				}
				batch = append(batch, q)
				body = append(body, q.req.events...)
			default:
				break drain
			}
		}
		first := time.Now()
		for {
			if ctx.Err() != nil {
				return res
			}
			t0 := time.Now()
			a, err := conn.post("/v1/events", body)
			// Retried while the server asks, but like any post not for
			// longer than the grace past the run's end (each retry's own
			// deadline starts afresh).
			if err == nil && a.status == http.StatusServiceUnavailable && a.retryAfter && conn.overdue(first) {
				err = fmt.Errorf("still answering 503 (Retry-After) %v after the run ended", time.Since(conn.stop).Round(time.Millisecond))
			}
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
				err = statusError(a)
			}
			if err != nil {
				res.err = fmt.Errorf("events of %d requests (the first: request %d of client %d): %w", len(batch), batch[0].i, batch[0].client, err)
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
			res.events += q.req.nEvents
			res.blockOps += q.req.blockOps
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

// statusError is an unexpected answer as an error: its status and the start
// of its body (another server's whole HTML page made an error of hundreds
// of lines).
func statusError(a answer) error {
	body := bytes.TrimSpace(a.body)
	const most = 200
	if len(body) > most {
		return fmt.Errorf("status %d: %s... (%d bytes; is the target a kvidx node?)", a.status, body[:most], len(body))
	}
	return fmt.Errorf("status %d: %s", a.status, body)
}
