package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
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
}

// String formats the report on a few lines.
func (r LoadReport) String() string {
	return fmt.Sprintf("concurrency %d, %v, %d requests (exhausted: %v)\n"+
		"events:  %d in %d posts, %.0f events/s, %.0f block ops/s, post p50 %v p99 %v, %d rejected, %d overload retries\n"+
		"matches: %d, %.0f/s, p50 %v p99 %v",
		r.Concurrency, r.Elapsed.Round(time.Millisecond), r.Requests, r.Exhausted,
		r.Events, r.EventPosts, r.EventsPerSec, r.BlockOpsPerSec, r.EventsP50, r.EventsP99, r.Rejected, r.Retries,
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
// concurrency clients for at most duration, each request as POST /v1/match
// with its local hashes followed by POST /v1/events with its events as
// NDJSON. Client c owns the workers w with w % concurrency == c and sends
// their requests in workload order, so each worker's events arrive in order.
// The run ends when duration passes or the requests run out; ctx cancels it.
// The server should start empty: replayed events assume the workload's
// cache state. A 503 overload answer is retried after a short pause; any
// other failure stops the run with an error naming the request.
func LoadGen(ctx context.Context, target string, trace *workload.Trace, cfg workload.Config, concurrency int, duration time.Duration) (LoadReport, error) {
	if concurrency < 1 {
		return LoadReport{}, fmt.Errorf("loadgen: concurrency must be >= 1, got %d", concurrency)
	}
	if duration <= 0 {
		return LoadReport{}, fmt.Errorf("loadgen: duration must be positive, got %v", duration)
	}
	target = strings.TrimRight(target, "/")
	perClient := make([][]loadRequest, concurrency)
	var buf []byte
	err := workload.Generate(ctx, trace, cfg, func(req workload.Request, events []engine.Event) error {
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
		return nil
	})
	if err != nil {
		return LoadReport{}, fmt.Errorf("loadgen: generating the workload: %w", err)
	}

	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		MaxConnsPerHost:     concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]clientResult, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(duration)
	for c := range concurrency {
		wg.Go(func() {
			results[c] = runClient(ctx, client, target, perClient[c], stop)
			if results[c].err != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	rep := LoadReport{Concurrency: concurrency, Elapsed: elapsed, Exhausted: true}
	var matchLat, eventLat []time.Duration
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
	}
	secs := elapsed.Seconds()
	rep.EventsPerSec = float64(rep.Events) / secs
	rep.BlockOpsPerSec = float64(rep.BlockOps) / secs
	rep.MatchesPerSec = float64(rep.Matches) / secs
	rep.MatchP50, rep.MatchP99 = percentiles(matchLat)
	rep.EventsP50, rep.EventsP99 = percentiles(eventLat)
	return rep, errors.Join(errs...)
}

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
	matchLat, eventLat                            []time.Duration
	err                                           error
}

func runClient(ctx context.Context, client *http.Client, target string, reqs []loadRequest, stop time.Time) (res clientResult) {
	var body bytes.Buffer
	for i, lr := range reqs {
		if time.Now().After(stop) || ctx.Err() != nil {
			return res
		}
		d, _, err := post(ctx, client, target+"/v1/match", lr.match, &body)
		if err != nil {
			res.err = fmt.Errorf("request %d: match: %w", i, err)
			return res
		}
		res.matchLat = append(res.matchLat, d)
		if lr.events != nil {
			for {
				d, retry, err := post(ctx, client, target+"/v1/events", lr.events, &body)
				if err != nil {
					res.err = fmt.Errorf("request %d: events: %w", i, err)
					return res
				}
				if retry {
					res.retries++
					select {
					case <-ctx.Done():
						return res
					case <-time.After(5 * time.Millisecond):
					}
					continue
				}
				res.eventLat = append(res.eventLat, d)
				var ans struct {
					Rejected []json.RawMessage `json:"rejected"`
				}
				if err := json.Unmarshal(body.Bytes(), &ans); err != nil {
					res.err = fmt.Errorf("request %d: events answer %q: %w", i, body.Bytes(), err)
					return res
				}
				res.rejected += len(ans.Rejected)
				break
			}
			res.events += lr.nEvents
			res.blockOps += lr.blockOps
		}
		res.requests++
	}
	return res
}

// post sends one JSON body and reads the answer into body. retry is true
// for a 503 with Retry-After (overload); other non-200 answers are errors.
func post(ctx context.Context, client *http.Client, url string, payload []byte, body *bytes.Buffer) (d time.Duration, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	body.Reset()
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	d = time.Since(start)
	if err != nil {
		return 0, false, fmt.Errorf("reading the answer: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return d, false, nil
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		return d, true, nil
	}
	return 0, false, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body.Bytes()))
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return at(0.50), at(0.99)
}
