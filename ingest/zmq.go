package ingest

// Exactly once, in order.
//
// A source appends each batch to its [Store] together with the position
// wal.Position{Source: "zmq:<endpoint>", Seq: seq}, in one atomic Append,
// so after a restart [Store.Applied] names the last applied batch and the
// source asks the replay endpoint (a ROUTER; the source's DEALER sends
// ["", start as 8 bytes] and reads ["", seq, payload] or ["", topic, seq,
// payload] until seq -1) for everything after it (from 0 with no recorded
// position). Live batches:
//
//   - at or below the last applied sequence: duplicates, dropped, unless
//     (live) made after the batch applied last: each batch's ts is
//     recorded with its sequence, in microseconds, as position
//     "zmq:<endpoint>#ts", and a later one is a restarted engine's (kvidx
//     was away while it restarted): the worker is cleared and the new
//     engine's batches are replayed from 0 (without a replay endpoint,
//     the ones before are a gap); with a ts recorded, a replay asks from
//     the last sequence applied, so that a new engine already past it
//     sends a batch there made later;
//   - sequence 0 after higher ones: the engine restarted; the worker is
//     cleared (a Cleared event per DP rank the source has seen; other
//     sources may feed the worker id's other ranks) in the same Append as
//     the batch. The ranks seen are recorded too, as positions
//     "zmq:<endpoint>#dp<rank>" in the entry of the first batch of each, so
//     that a clear after a restart of kvidx still forgets the ranks seen
//     before it (a WAL of a kvidx that recorded none: the first clear
//     removes the worker id, see ranksUnknown);
//   - past the next expected one: a replay from the next expected one; if
//     the batches are still missing (no replay endpoint, a failed replay,
//     or a replay that starts past the requested sequence because the
//     engine's buffer moved on) the worker is cleared before the batch:
//     its missed events are gone;
//   - undecodable: counted, the worker cleared (the ranks this source
//     fed), the position moved to it unless its sequence jumps ahead or
//     nothing was applied yet (a sequence may be as garbled as the
//     payload; a restart's sequence 0 is recorded).
//
// The worker id an endpoint feeds is recorded with its batches too, as
// position "zmq:<endpoint>#worker". When a restart of kvidx gives the
// endpoint another id, [ReconcileZMQ] (before any source applies anything,
// so that ids swapped between two endpoints cannot have one source clear
// what the other applied) clears the DP ranks of the old id the endpoint
// fed and starts the new id from nothing, in one atomic Append: the rank
// positions set to 0 (forgotten), ts and groups to 0, and
// "zmq:<endpoint>#reset" to 1, which voids the recorded sequence until the
// next batch applied (with a replay endpoint the source asks from 0). An
// endpoint the WAL records that is configured no more (removed, or spelled
// otherwise) clears, with [ForgetRemovedZMQ] (before any source applies
// anything too), the DP ranks it fed its recorded worker id, with the same
// positions but "#worker" (kept): it is forgotten, and a later start finds
// nothing to clear. Neither clears a rank of the id that a configured
// endpoint fed too and still feeds (two endpoints given one worker id, or
// one spelled two ways): its blocks are kept (see stillFed).
//
// A lost sequence 0 after an engine restart (the first batches published
// before the SUB reconnected) is told by the ts of the new engine's next
// batches, at or below the recorded sequence but made later (above). Batches
// without a ts (or a recorded sequence without one) cannot be told from
// duplicates: the source drops them until the engine's sequence passes the
// recorded one, then applies the new engine's batches on top of the old
// engine's blocks, which stay until a later restart, gap or undecodable
// batch clears the worker (nothing else in vLLM's events tells two engines
// apart). Nor, ts or not, can a new engine whose first batch the source sees
// is the one after the recorded sequence: its batch is taken for the old
// engine's next (one further on is a gap, which clears the worker). With a
// ts recorded and a replay endpoint, a start of kvidx asks from the recorded
// sequence itself, which tells such an engine too (its batch there is later).
//
// Bad input and connections.
//
// Wrong frame counts, bad sequence frames, undecodable payloads, unknown
// event classes, lost batches, failed replays, dial failures and refused
// appends are counted per reason ([SourceStats].Errors, [ZMQOptions].OnError)
// and logged at most once per reason per interval; the source keeps
// running. It dials with its own exponential backoff and redials when the
// connection drops (a publisher restart), and reports Connected, LastSeq,
// HighestSeq and Lag for readiness and metrics.
//
// A peer that declares a ZMTP message (the sum of its frames, commands
// included) over 64 MiB, far above any vLLM batch, has its connection
// closed at that frame's header, before zmq4 would allocate the declared
// size: the failure counts as a dial failure (during the handshake) or a
// lost connection (after it), and the source redials with its backoff.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
	"github.com/zeebo/xxh3"
	"golang.org/x/sync/semaphore"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/internal/loglimit"
	"github.com/kvidx/kvidx/wal"
)

// Store is what a source needs of the durable store (recovery.Store
// satisfies it): Append logs and applies a batch of events together with
// the source positions it reaches, atomically; Applied returns the last
// applied WAL index and the last recorded position per source.
type Store interface {
	Append(ctx context.Context, events []engine.Event, positions []wal.Position) (uint64, []error, error)
	Applied() (uint64, []wal.Position)
}

// Error reasons counted by [ZMQSource] (see [SourceStats].Errors and
// [ZMQOptions].OnError).
const (
	ReasonFrames     = "frames"        // a message without exactly 3 frames
	ReasonSeq        = "seq"           // a sequence frame that is not 8 bytes
	ReasonDecode     = "decode"        // an undecodable payload (the worker is cleared, the batch skipped)
	ReasonUnknown    = "unknown_event" // events of an unknown class (skipped)
	ReasonGap        = "gap"           // batches lost for good (the worker is cleared)
	ReasonReplay     = "replay"        // a replay request failed or timed out
	ReasonConnect    = "connect"       // dialing the publisher failed
	ReasonDisconnect = "disconnect"    // the connection to the publisher was lost
	ReasonAppend     = "append"        // the store refused a batch (retried)
)

// ZMQOptions configure a [ZMQSource]. The zero value is valid.
type ZMQOptions struct {
	// Logger receives the source's reports; default slog.Default().
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// reconnects and between retries of a refused append; default 100ms
	// and 5s.
	MinBackoff, MaxBackoff time.Duration
	// DialTimeout bounds one connection attempt, TCP connect and ZMTP
	// handshake together; default 5s.
	DialTimeout time.Duration
	// ReplayTimeout is the longest wait for one replay reply; default 10s.
	ReplayTimeout time.Duration
	// LogInterval is the least time between two logged errors of the same
	// reason (the others are counted and summarised); default 10s.
	LogInterval time.Duration
	// OnError, if set, is called (synchronously, keep it cheap) for every
	// counted error, e.g. to increment kvidx_source_errors_total{source,reason}.
	OnError func(source, reason string)
	// QueueSize is how many received messages may wait while a batch is
	// appended or a replay runs; default 1024.
	QueueSize int
	// QueueBytes bounds the bytes of those messages; default 256 MiB. A
	// peer may send messages of up to 64 MiB (maxZMTPMessage): by count
	// alone, a stalled store and a busy peer could pin tens of GiB. When the
	// queue is full the source stops reading, and the publisher's own
	// high-water mark decides what to drop (a gap the source then sees).
	// zmq4 buffers up to 11 more messages per socket outside this bound
	// (its queue of 10 and the one it is reading).
	QueueBytes int64
}

// SourceStats is a snapshot of a source's state and counters.
type SourceStats struct {
	Source    string // "zmq:<endpoint>"
	Endpoint  string
	WorkerID  uint64
	Connected bool
	// HasSeq tells whether LastSeq is known (a batch was applied, or a
	// position was recovered).
	HasSeq bool
	// LastSeq is the sequence number of the last applied batch.
	LastSeq uint64
	// HighestSeq is the highest sequence number received (live, counted as
	// it arrives, since the engine's last sequence 0; or replayed).
	HighestSeq uint64
	// Lag is HighestSeq - LastSeq (0 when either is unknown or behind).
	Lag uint64
	// LastBatch is when the last batch was applied (zero: never).
	LastBatch time.Time
	// Batches and Events count applied batches and their events;
	// Rejected the events the index rejected.
	Batches, Events, Rejected uint64
	// Duplicates counts batches dropped as already applied.
	Duplicates uint64
	// OtherMedium counts the stores and removals of another medium than
	// the GPU (vLLM's CPU offloading tier), skipped.
	OtherMedium uint64
	// OtherGroup counts the stores and removals of a hybrid model's
	// KV-cache group that is not a full-attention one, skipped.
	OtherGroup uint64
	// Replays counts replay requests, ReplayedBatches the batches they
	// delivered (duplicates included).
	Replays, ReplayedBatches uint64
	// Resets counts engine restarts seen (sequence 0 after higher ones);
	// Clears the times the worker was cleared (resets, lost batches).
	Resets, Clears uint64
	// Errors counts errors per reason (the Reason constants).
	Errors map[string]uint64
	// LastConnError is the last failed dial or lost connection to the
	// publisher ("" when none): why the source is not connected.
	LastConnError string
}

// ZMQSource follows one vLLM KV-event publisher: a SUB socket on the
// endpoint, subscribed to every topic, and optionally a DEALER on the
// engine's replay endpoint to fill gaps. It appends each batch, in sequence
// order and exactly once, to the store with its position
// {Source: "zmq:<endpoint>", Seq: seq}. See the package documentation.
type ZMQSource struct {
	spec  ZMQSpec
	name  string
	store Store
	opts  ZMQOptions
	log   *slog.Logger
	zlog  *log.Logger
	rl    loglimit.Limiter

	mu    sync.Mutex
	stats SourceStats
	// resets counts the live sequence 0s received (under mu): a replay
	// whose batches arrive after one is from the engine before it, and
	// must not raise the new engine's HighestSeq.
	resets uint64

	// Owned by the Run goroutine.
	dec VLLMDecoder
	// groups is the decoder's partial groups as last recorded in the WAL.
	groups uint64
	// replayResets is resets when the running replay began.
	replayResets uint64
	last         uint64
	have         bool
	ranks        map[uint32]struct{} // DP ranks seen, at most maxDPRanks
	// ranksUnknown: the store records a position of this source but no DP
	// rank and no ranksMark, as a WAL written by a kvidx before it recorded ranks does (every
	// batch applied since records its rank): the ranks whose blocks the
	// source holds are unknown, so the next clear removes the worker id,
	// as that kvidx did, and no rank is recorded before it (a restart
	// before that clear must still find the ranks unknown).
	ranksUnknown bool
	// markRanks: that clear was made, and the store is yet to record that
	// the ranks are known (a ranksMark position, written with the next
	// append).
	markRanks bool
	// zeroSum is a hash of the batch 0 applied last, when this process
	// applied it (haveZero): an engine that restarts before its batch 1
	// sends a batch 0 again, which only its payload (its timestamp at
	// least) tells from the one applied.
	zeroSum  uint64
	haveZero bool
	// lastTS is the latest ts of the batches applied up to last, in
	// microseconds (0: not known), recorded with it: a live batch at or
	// below last with a later ts is a restarted engine's, not a duplicate.
	lastTS uint64
	// pendingClear: a restarted engine was found and its batches are being
	// replayed from 0: the first one applied clears the worker first.
	pendingClear bool
	// restartReplay: that replay from 0 is running.
	restartReplay bool
	// worker is the worker id the WAL records this endpoint feeds, when
	// haveWorker (WALs from before kvidx recorded it have none).
	worker     uint64
	haveWorker bool
	// reset: the WAL's "#reset" position voids the recorded sequence (the
	// worker id changed, see Reconcile); the next append sets it back.
	reset bool
}

// maxDPRanks bounds the distinct data_parallel_rank values one source
// keeps. The rank is a uint32 from the wire, and every clear of the worker
// names each rank seen in one event, so without a bound a corrupt or hostile
// publisher could make every later clear a WAL entry of tens of thousands of
// events (and the set grow for ever). A vLLM engine has a few DP ranks; a
// batch that would be the source's rank number maxDPRanks+1 is treated as
// undecodable (see [ZMQSource.deliver]).
const maxDPRanks = 1024

// NewZMQSource returns a source for spec appending to store. It does
// nothing until [ZMQSource.Run].
func NewZMQSource(spec ZMQSpec, store Store, opts ZMQOptions) *ZMQSource {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.ReplayTimeout <= 0 {
		opts.ReplayTimeout = 10 * time.Second
	}
	if opts.LogInterval <= 0 {
		opts.LogInterval = 10 * time.Second
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 1024
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 256 << 20
	}
	name := SourceName(spec.Endpoint)
	lg := opts.Logger.With("source", name, "worker_id", spec.WorkerID)
	// Stats reports the sequence the store recorded applied before Run
	// restores the rest: a start's clears (ReconcileZMQ, ForgetRemovedZMQ)
	// hold the sources back, for long when the store refuses appends, and
	// meanwhile a source that had applied batch N showed 0.
	_, positions := store.Applied()
	last, have := recordedSeq(positions, name)
	return &ZMQSource{
		spec:  spec,
		name:  name,
		store: store,
		opts:  opts,
		log:   lg,
		zlog:  slog.NewLogLogger(lg.Handler(), slog.LevelDebug),
		rl:    loglimit.Limiter{Interval: opts.LogInterval},
		stats: SourceStats{Source: name, Endpoint: spec.Endpoint, WorkerID: spec.WorkerID, HasSeq: have, LastSeq: last, Errors: map[string]uint64{}},
		ranks: map[uint32]struct{}{},
	}
}

// recordedSeq returns the sequence of the last batch positions record
// applied for the source named name, unless none is or its "#reset" voids
// it (see [ZMQSource.Reconcile]).
func recordedSeq(positions []wal.Position, name string) (seq uint64, ok bool) {
	voided := false
	for _, p := range positions {
		switch p.Source {
		case name:
			seq, ok = p.Seq, true
		case name + resetMark:
			voided = p.Seq != 0
		}
	}
	if voided {
		return 0, false
	}
	return seq, ok
}

// SourceName is the WAL position name of the ZMQ source of endpoint.
func SourceName(endpoint string) string { return "zmq:" + endpoint }

// rankMark separates a source's name from a DP rank in the names of the
// positions recording the ranks it has seen.
const rankMark = "#dp"

// rankPosition is the position recording that the source saw DP rank r:
// the set of ranks whose blocks a clear must forget outlives a restart of
// kvidx, as the blocks do.
func (s *ZMQSource) rankPosition(r uint32) wal.Position {
	return wal.Position{Source: s.name + rankMark + strconv.FormatUint(uint64(r), 10), Seq: 1}
}

// groupsMark names the position holding the decoder's partial KV-cache
// groups ("zmq:<endpoint>#groups", see VLLMDecoder.PartialGroups): a
// removal names only its group, whose kind its stores told.
const groupsMark = "#groups"

// tsMark names the position holding the latest ts of the batches applied,
// in microseconds ("zmq:<endpoint>#ts"; 0 when the last one had none).
const tsMark = "#ts"

// tsMicros is a batch's ts in microseconds, or 0 when it has none (ok
// false), or one before 1970 or past 2^64 µs.
func tsMicros(ts float64, ok bool) uint64 {
	if !ok || ts <= 0 || ts >= math.MaxUint64/1e6 {
		return 0
	}
	return uint64(ts * 1e6)
}

// workerMark names the position holding the worker id the endpoint feeds
// ("zmq:<endpoint>#worker"): a restart of kvidx that gives the endpoint
// another id clears what it fed the old one (see [ZMQSource.Reconcile]).
const workerMark = "#worker"

// resetMark names the position that voids the endpoint's recorded
// sequence ("zmq:<endpoint>#reset", 1): its worker id changed, and the new
// id starts from nothing, as for an engine restart. The next batch applied
// sets it back to 0.
const resetMark = "#reset"

// ranksMark names the position ("zmq:<endpoint>#ranks", 1) recording
// that the endpoint's "#dp" positions are all the ranks it fed, none
// included: the clear that ends ranksUnknown (and a Reconcile) writes it,
// or the WAL of a source with a position but no rank after that clear (an
// undecodable batch, a replay-told restart, a changed worker id) was read
// as ranks unknown again, and the next clear removed the worker id, whose
// other ranks other endpoints may feed.
const ranksMark = "#ranks"

// rankOf returns the DP rank a position name of this source's records.
func (s *ZMQSource) rankOf(source string) (uint32, bool) {
	rest, ok := strings.CutPrefix(source, s.name+rankMark)
	if !ok {
		return 0, false
	}
	r, err := strconv.ParseUint(rest, 10, 32)
	return uint32(r), err == nil
}

// Name returns the source's name, "zmq:<endpoint>".
func (s *ZMQSource) Name() string { return s.name }

// Spec returns the source's spec.
func (s *ZMQSource) Spec() ZMQSpec { return s.spec }

// Stats returns a snapshot of the source's state and counters. It is safe
// to call at any time from any goroutine.
func (s *ZMQSource) Stats() SourceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Errors = make(map[string]uint64, len(s.stats.Errors))
	for k, v := range s.stats.Errors {
		st.Errors[k] = v
	}
	if st.HasSeq && st.HighestSeq > st.LastSeq {
		st.Lag = st.HighestSeq - st.LastSeq
	}
	return st
}

// restore takes the source's state from the positions the store recorded:
// the last batch applied, its ts, the DP ranks fed, the partial KV-cache
// groups, the worker id fed. A rank position of 0 is a rank forgotten, and
// a "#reset" of 1 voids the sequence (see [ZMQSource.Reconcile]).
func (s *ZMQSource) restore() {
	_, positions := s.store.Applied()
	s.last, s.have = recordedSeq(positions, s.name)
	ranksKnown := false
	for _, p := range positions {
		switch p.Source {
		case s.name + tsMark:
			s.lastTS = p.Seq
		case s.name + groupsMark:
			s.groups = p.Seq
			s.dec.SetPartialGroups(p.Seq)
		case s.name + workerMark:
			s.worker, s.haveWorker = p.Seq, true
		case s.name + resetMark:
			s.reset = p.Seq != 0
		case s.name + ranksMark:
			ranksKnown = p.Seq != 0
		}
		if r, ok := s.rankOf(p.Source); ok && p.Seq != 0 && len(s.ranks) < maxDPRanks {
			s.ranks[r] = struct{}{}
		}
	}
	s.ranksUnknown = s.have && len(s.ranks) == 0 && !ranksKnown
	s.mu.Lock()
	s.stats.HasSeq, s.stats.LastSeq = s.have, s.last
	s.mu.Unlock()
}

// Run follows the publisher until ctx is cancelled, then returns nil once
// its sockets are closed and its goroutines done. It reads the source's
// position from the store first ([ZMQSource.Reconcile]: with several
// sources on one store, call [ReconcileZMQ] before running any) and, with
// a replay endpoint, asks for everything after it (from 0 when there is
// none, or when the endpoint's worker id changed). Bad input, lost
// connections and refused appends are counted and survived, never returned.
// Run must not be called twice at once on one source.
func (s *ZMQSource) Run(ctx context.Context) error {
	if err := s.Reconcile(ctx); err != nil {
		return nil // ctx done
	}
	s.log.Info("zmq source starting", "endpoint", s.spec.Endpoint, "replay", s.spec.Replay,
		"resume_seq", s.next(), "recorded", s.have)

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	msgs := make(chan queued, s.opts.QueueSize)
	budget := semaphore.NewWeighted(s.opts.QueueBytes)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.subLoop(ctx, msgs, budget)
	}()

	if s.spec.Replay != "" {
		if err := s.replay(ctx, s.replayFrom()); err != nil {
			return nil // ctx done
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			err := s.handle(ctx, m.frames)
			budget.Release(m.bytes)
			if err != nil {
				return nil // ctx done
			}
		}
	}
}

// next is the sequence number of the next batch to apply.
func (s *ZMQSource) next() uint64 {
	if !s.have {
		return 0
	}
	return s.last + 1
}

func (s *ZMQSource) setConnected(c bool) {
	s.mu.Lock()
	s.stats.Connected = c
	s.mu.Unlock()
}

// fail counts and (rate-limited) logs an error.
func (s *ZMQSource) fail(reason string, err error) {
	if err != nil && strings.Contains(err.Error(), guardedScheme) {
		// The transport wrapper's scheme is the source's business, not
		// the operator's: name the endpoint as given, in /readyz and in
		// the log.
		err = errors.New(strings.ReplaceAll(err.Error(), guardedScheme, ""))
	}
	s.mu.Lock()
	s.stats.Errors[reason]++
	if (reason == ReasonConnect || reason == ReasonDisconnect) && err != nil {
		s.stats.LastConnError = err.Error()
	}
	s.mu.Unlock()
	if s.opts.OnError != nil {
		s.opts.OnError(s.name, reason)
	}
	if ok, suppressed := s.rl.Allow(reason, time.Now()); ok {
		s.log.Warn("zmq source error", "reason", reason, "err", err, "suppressed_since_last", suppressed)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (s *ZMQSource) socketOptions() []zmq4.Option {
	return []zmq4.Option{
		zmq4.WithLogger(s.zlog),
		zmq4.WithDialerMaxRetries(0), // the source retries with its own backoff
		zmq4.WithDialerTimeout(s.opts.DialTimeout),
		zmq4.WithTimeout(s.opts.DialTimeout),
	}
}

// zmq4 (v0.17.0) bounds only the TCP connect of a Dial: the ZMTP handshake
// after it reads the peer's greeting without a deadline, never looks at the
// socket's context, and Close does not reach the connection (it is not yet
// one of the socket's), so a peer that accepts and stays silent blocked Dial,
// and with it Run and the reconnects, for ever. zmq4 has no dialer hook, but
// it looks transports up by URL scheme in a registry it exports and hands
// the transport's Dial the socket's context. So the source dials its tcp://
// and ipc:// endpoints as guarded+tcp:// and guarded+ipc://, through
// guardedTransport: the new connection gets the deadline of the attempt,
// which [dialGuard.connected] lifts once zmq4's Dial is done, and is closed
// when the socket's context ends (cancellation or Close), which is the only
// thing that interrupts the handshake's reads. The same hook caps the size
// of the messages a peer may declare (zmtpCapConn, maxZMTPMessage), which
// zmq4 does not bound either.

// guardedScheme prefixes the schemes of the transports registered below.
const guardedScheme = "kvidx-guarded+"

// registerGuarded registers the guarded transports once per process (the
// registry is global and refuses duplicates).
var registerGuarded = sync.OnceValue(func() error {
	for scheme, network := range map[string]string{"tcp": "tcp", "ipc": "unix"} {
		if err := zmq4.RegisterTransport(guardedScheme+scheme, guardedTransport{transport.New(network)}); err != nil {
			return fmt.Errorf("registering the zmq4 transport %s%s: %w", guardedScheme, scheme, err)
		}
	}
	return nil
})

// guardedEndpoint returns the endpoint to dial ep through guardedTransport,
// or ep itself for transports it does not wrap (inproc: the peer is in this
// process). A failed registration (another package took the name) falls
// back to the unguarded endpoint rather than never connecting.
func (s *ZMQSource) guardedEndpoint(ep string) string {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok || (scheme != "tcp" && scheme != "ipc") {
		return ep
	}
	if err := registerGuarded(); err != nil {
		s.log.Warn("zmq dials are not guarded: a peer that never completes the handshake can block the source", "err", err)
		return ep
	}
	return guardedScheme + scheme + "://" + addr
}

// dialGuardKey keys the [dialGuard] in a socket's context.
type dialGuardKey struct{}

// dialGuard is one socket's hook into guardedTransport: the deadline of its
// dial and, once connected, the connection.
type dialGuard struct {
	deadline time.Time
	mu       sync.Mutex
	conn     net.Conn
}

// guardedContext returns ctx carrying a new dialGuard whose attempt ends
// after timeout from now.
func guardedContext(ctx context.Context, timeout time.Duration) (context.Context, *dialGuard) {
	g := &dialGuard{deadline: time.Now().Add(timeout)}
	return context.WithValue(ctx, dialGuardKey{}, g), g
}

// connected lifts the handshake deadline once Dial succeeded. (Should the
// deadline pass between the handshake's end and this call, zmq4's reader
// fails, and the source sees a disconnect and redials.)
func (g *dialGuard) connected() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn != nil {
		g.conn.SetDeadline(time.Time{})
	}
}

// guardedTransport is a zmq4 transport that bounds and cancels the ZMTP
// handshake of the connections it dials (see guardedScheme), and caps the
// size of the messages their peers may declare (see maxZMTPMessage).
type guardedTransport struct{ inner transport.Transport }

func (t guardedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	conn, err := t.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	conn = &zmtpCapConn{Conn: conn, rd: zmtpTracker{limit: maxZMTPMessage}}
	if g, ok := ctx.Value(dialGuardKey{}).(*dialGuard); ok {
		if err := conn.SetDeadline(g.deadline); err != nil {
			conn.Close()
			return nil, fmt.Errorf("setting the handshake deadline on %s: %w", addr, err)
		}
		g.mu.Lock()
		g.conn = conn
		g.mu.Unlock()
	}
	// ctx is the socket's: it ends on cancellation and on Close.
	context.AfterFunc(ctx, func() { conn.Close() })
	return conn, nil
}

// maxZMTPMessage caps the bytes a peer may declare for one ZMTP message
// (the sum of its frames' sizes, so also any one frame or command). zmq4
// (v0.17.0) allocates each frame's body at the size its header declares,
// up to 2^63-1 bytes, in a reader goroutine of its own, and has no option
// to bound it: a publisher (or anything listening on a configured endpoint)
// that declared 2^62 bytes crashed the process (makeslice: len out of
// range, a panic kvidx cannot recover), and one that declared a few GiB
// exhausted its memory. A vLLM KV-event message is a topic, an 8-byte
// sequence and one msgpack batch of the events of one publishing interval,
// typically a few hundred bytes to a few MiB (a 128k-token prefill of
// 16-token blocks is 8k blocks, about 1 MiB of token ids and hashes);
// 64 MiB leaves a wide margin above that and bounds what a peer can make
// zmq4 allocate for one message.
const maxZMTPMessage = 64 << 20

// errZMTPTooLarge is the error of a zmtpCapConn whose peer declared a
// message larger than its cap.
var errZMTPTooLarge = errors.New("zmtp message too large")

// zmtpCapConn is a dialed connection whose Read follows the incoming ZMTP
// 3.x stream and fails, closing the connection, at the header of a frame
// that would make a message larger than maxZMTPMessage, before that header
// reaches zmq4, which then sees a broken connection (a failed dial during
// the handshake, a lost connection after it) and the source redials. It
// observes only the bytes its Read returns, so it never reads ahead of what
// zmq4 asked for. zmq4 reads a connection from one goroutine at a time (the
// handshake's, then its reader's), so the tracker needs no lock.
type zmtpCapConn struct {
	net.Conn
	rd  zmtpTracker
	err error // sticky: set once the cap was hit
}

func (c *zmtpCapConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if k, terr := c.rd.feed(p[:n]); terr != nil {
		c.err = terr
		c.Conn.Close()
		// Only the bytes before the offending frame's header are passed on.
		return k, terr
	}
	return n, err
}

// zmtpTracker is a state machine over the incoming bytes of a ZMTP 3.x
// connection (NULL mechanism, as kvidx uses; the framing is the same for
// the others): the 64-byte greeting, then frames, each a flags byte (0x01
// MORE, 0x02 LONG, 0x04 COMMAND), a size (1 byte, or 8 bytes big-endian
// with LONG) and that many body bytes. The bytes may come split anywhere.
type zmtpTracker struct {
	limit uint64 // the most bytes one message (its frames together) may declare

	greeting int    // greeting bytes seen, up to zmtpGreetingLen
	state    uint8  // what the next byte is (zmtpFlags, zmtpSize or zmtpBody)
	flags    byte   // the current frame's flags
	sizeLen  int    // size bytes the current header has (1 or 8)
	sizeGot  int    // size bytes seen so far
	size     uint64 // the size, as far as read
	body     uint64 // body bytes still to come
	msg      uint64 // bytes declared by the earlier frames of the current message
	err      error
}

// zmtpGreetingLen is the length of a ZMTP 3.x greeting.
const zmtpGreetingLen = 64

const (
	zmtpFlags = iota
	zmtpSize
	zmtpBody
)

// feed advances the tracker over p, the next bytes of the stream. When a
// frame header declares a size that makes its message exceed the limit,
// feed returns an error and the number of bytes of p before that header
// (0 when the header began in an earlier call); after that it keeps
// returning the error.
func (t *zmtpTracker) feed(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	i := 0
	if t.greeting < zmtpGreetingLen {
		n := min(zmtpGreetingLen-t.greeting, len(p))
		t.greeting += n
		i = n
	}
	hdr := 0 // where the current frame's header began in p
	for i < len(p) {
		switch t.state {
		case zmtpFlags:
			hdr = i
			t.flags = p[i]
			t.sizeLen, t.sizeGot, t.size = 1, 0, 0
			if t.flags&0x02 != 0 { // LONG
				t.sizeLen = 8
			}
			t.state = zmtpSize
			i++
		case zmtpSize:
			t.size = t.size<<8 | uint64(p[i])
			t.sizeGot++
			i++
			if t.sizeGot < t.sizeLen {
				continue
			}
			if t.size > t.limit-t.msg {
				t.err = fmt.Errorf("%w: the peer declared a %s frame of %d bytes after %d bytes of its message, over the %d-byte cap (closing the connection)",
					errZMTPTooLarge, t.kind(), t.size, t.msg, t.limit)
				return hdr, t.err
			}
			t.msg += t.size
			t.body = t.size
			t.state = zmtpBody
			if t.body == 0 {
				t.endFrame()
			}
		case zmtpBody:
			n := uint64(len(p) - i)
			if n >= t.body {
				i += int(t.body)
				t.body = 0
				t.endFrame()
			} else {
				i = len(p)
				t.body -= n
			}
		}
	}
	return len(p), nil
}

// endFrame moves past a frame's last body byte.
func (t *zmtpTracker) endFrame() {
	t.state = zmtpFlags
	if t.flags&0x01 == 0 { // the message's last frame
		t.msg = 0
	}
}

func (t *zmtpTracker) kind() string {
	if t.flags&0x04 != 0 {
		return "command"
	}
	return "message"
}

func (t guardedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return t.inner.Listen(ctx, addr)
}

func (t guardedTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

// subLoop keeps a SUB socket connected to the endpoint, reconnecting with
// backoff, and passes every received message on to out.
func (s *ZMQSource) subLoop(ctx context.Context, out chan<- queued, budget *semaphore.Weighted) {
	backoff := s.opts.MinBackoff
	for ctx.Err() == nil {
		gctx, guard := guardedContext(ctx, s.opts.DialTimeout)
		sctx, scancel := context.WithCancel(gctx)
		sub := zmq4.NewSub(sctx, s.socketOptions()...)
		err := sub.SetOption(zmq4.OptionSubscribe, "")
		if err == nil {
			err = sub.Dial(s.guardedEndpoint(s.spec.Endpoint))
		}
		if err == nil {
			guard.connected()
		}
		if err != nil {
			sub.Close()
			scancel()
			if ctx.Err() != nil {
				return
			}
			s.fail(ReasonConnect, err)
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, s.opts.MaxBackoff)
			continue
		}
		s.setConnected(true)
		s.log.Info("zmq source connected", "endpoint", s.spec.Endpoint)
		backoff = s.opts.MinBackoff
		for {
			var msg zmq4.Msg
			msg, err = sub.Recv()
			if err != nil {
				break
			}
			s.received(msg.Frames)
			m := queued{frames: msg.Frames, bytes: s.queuedBytes(msg.Frames)}
			if err = budget.Acquire(ctx, m.bytes); err != nil {
				break
			}
			select {
			case out <- m:
			case <-ctx.Done():
			}
		}
		s.setConnected(false)
		sub.Close()
		scancel()
		if ctx.Err() != nil {
			return
		}
		s.fail(ReasonDisconnect, err)
		sleepCtx(ctx, backoff)
	}
}

// received counts a live message's sequence number into HighestSeq as it
// arrives, so that Lag includes the batches waiting in the queue (counted
// when they were taken off it, Lag showed 1 with 49 batches waiting). A
// sequence 0 starts the count again: the engine restarted.
func (s *ZMQSource) received(frames [][]byte) {
	seq, _, err := liveSeq(frames)
	if err != nil {
		return // handle counts it
	}
	s.mu.Lock()
	if seq == 0 {
		s.stats.HighestSeq = 0
		s.resets++
	}
	s.stats.HighestSeq = max(s.stats.HighestSeq, seq)
	s.mu.Unlock()
}

// queued is a received message waiting, with what it takes of the byte
// budget.
type queued struct {
	frames [][]byte
	bytes  int64
}

// queuedBytes is what a message takes of the byte budget: its size, at most
// the whole budget (a message larger than the budget waits for an empty
// queue instead of for ever).
func (s *ZMQSource) queuedBytes(frames [][]byte) int64 {
	var n int64
	for _, f := range frames {
		n += int64(len(f))
	}
	return min(n, s.opts.QueueBytes)
}

// handle applies one live message. It returns an error only when ctx ends.
func (s *ZMQSource) handle(ctx context.Context, frames [][]byte) error {
	seq, reason, err := liveSeq(frames)
	if err != nil {
		s.fail(reason, err)
		return nil
	}
	return s.deliver(ctx, seq, frames[2], false)
}

// liveSeq returns a live message's sequence number, or why the message is
// malformed (a reason for the error counts, and the error).
func liveSeq(frames [][]byte) (seq uint64, reason string, err error) {
	if len(frames) != 3 {
		return 0, ReasonFrames, fmt.Errorf("message of %d frames, want 3 (topic, seq, payload)", len(frames))
	}
	if len(frames[1]) != 8 {
		return 0, ReasonSeq, fmt.Errorf("sequence frame of %d bytes, want 8", len(frames[1]))
	}
	return binary.BigEndian.Uint64(frames[1]), "", nil
}

// deliver applies the batch seq (live, or replayed) in sequence order:
// duplicates are dropped, a live gap asks for a replay, a reset or lost
// batches clear the worker first. It returns an error only when ctx ends.
func (s *ZMQSource) deliver(ctx context.Context, seq uint64, payload []byte, replayed bool) error {
	if replayed {
		// Live batches are counted as they arrive (see received): counted
		// again here, a queued batch of an engine since restarted would
		// raise the new engine's count.
		s.mu.Lock()
		if s.resets == s.replayResets {
			// Not if the engine restarted since the replay began: the
			// batch is the old engine's.
			s.stats.HighestSeq = max(s.stats.HighestSeq, seq)
		}
		s.stats.ReplayedBatches++
		s.mu.Unlock()
	}
	return s.apply(ctx, seq, payload, replayed)
}

// apply is deliver past its counting of replayed batches (restarted
// applies a batch deliver counted already).
func (s *ZMQSource) apply(ctx context.Context, seq uint64, payload []byte, replayed bool) error {
	clear := s.pendingClear
	if s.have && seq <= s.last && s.lastTS != 0 {
		if tsMicros(s.dec.TS(payload)) > s.lastTS {
			return s.restarted(ctx, seq, payload, replayed)
		}
	}
	if s.have && seq <= s.last {
		restartAtZero := seq == 0 && s.last == 0 && !replayed && s.haveZero && xxh3.Hash(payload) != s.zeroSum
		if !restartAtZero && (seq != 0 || s.last == 0 || replayed) {
			s.mu.Lock()
			s.stats.Duplicates++
			s.mu.Unlock()
			return nil
		}
		// Sequence 0 after higher ones: the engine restarted and its
		// blocks are gone; its own clock takes over from the old one's.
		clear = true
		s.lastTS = 0
		s.mu.Lock()
		s.stats.Resets++
		s.mu.Unlock()
		s.log.Info("zmq publisher restarted (sequence reset): clearing the worker", "last_seq", s.last)
	} else if next := s.next(); seq > next {
		// Not while the batch that showed a restart is applied: its
		// replay from 0 has run (or failed) already.
		if !replayed && !s.restartReplay && s.spec.Replay != "" {
			if err := s.replay(ctx, s.replayFrom()); err != nil {
				return err
			}
			if s.have && seq <= s.last {
				s.mu.Lock()
				s.stats.Duplicates++
				s.mu.Unlock()
				return nil
			}
			next = s.next()
		}
		if seq > next {
			clear = true
			s.fail(ReasonGap, fmt.Errorf("batches %d to %d lost: clearing the worker", next, seq-1))
		}
	}

	b, err := s.dec.Decode(payload, s.spec.WorkerID)
	if err != nil {
		// The batch's effect is unknown: forget the worker. Its position
		// becomes the batch's sequence unless that jumps ahead: a sequence
		// that jumps may be as garbled as the payload, and recorded it
		// would drop every real batch below it as a duplicate (a garbage
		// message with sequence 2^62 stopped the source for good); a real
		// gap shows again at the next batch. A sequence 0 after higher
		// ones (an engine restart) is recorded, or the new engine's next
		// batches would be dropped as duplicates.
		s.fail(ReasonDecode, fmt.Errorf("batch %d: %w (clearing the worker)", seq, err))
		if s.have && seq <= s.next() {
			// Its ts, when that much decodes, still counts: a live copy
			// of it must not look made after the batches applied.
			return s.append(ctx, s.clearEvents(nil), seq, tsMicros(s.dec.TS(payload)), true)
		}
		// Its sequence is not taken: nor does it stay the highest received
		// (counted at arrival, it held Lag near 2^62 for good).
		s.mu.Lock()
		if s.stats.HighestSeq == seq {
			s.stats.HighestSeq = s.last
		}
		s.mu.Unlock()
		if !s.have {
			// Nothing applied yet: nothing to forget (no rank seen), and
			// no position to keep.
			return nil
		}
		return s.append(ctx, s.clearEvents(nil), s.last, s.lastTS, true)
	}
	if _, known := s.ranks[b.DPRank]; !known && len(s.ranks) >= maxDPRanks {
		// Like an undecodable batch: its events are not applied, and the
		// rank is not remembered, so the clear stays bounded; since the
		// batch's effect on the worker is lost, the worker is cleared.
		s.fail(ReasonDecode, fmt.Errorf("batch %d: data_parallel_rank %d beyond the %d distinct ranks a source accepts (clearing the worker)", seq, b.DPRank, maxDPRanks))
		return s.append(ctx, s.clearEvents(nil), seq, tsMicros(b.TS, b.HasTS), true)
	}
	if b.Unknown > 0 {
		s.fail(ReasonUnknown, fmt.Errorf("batch %d: %d events of an unknown class skipped", seq, b.Unknown))
	}
	if b.OtherMedium > 0 || b.OtherGroup > 0 {
		s.mu.Lock()
		s.stats.OtherMedium += uint64(b.OtherMedium)
		s.stats.OtherGroup += uint64(b.OtherGroup)
		s.mu.Unlock()
	}
	events := b.Events
	if clear {
		events = append(s.clearEvents(&b.DPRank), b.Events...)
	}
	var rankPos []wal.Position
	if _, known := s.ranks[b.DPRank]; !known && !s.ranksUnknown {
		// With "#ranks": a WAL that records this source's position and
		// no rank is then one from before ranks were recorded, never one
		// whose ranks were all forgotten since.
		rankPos = append(rankPos, s.rankPosition(b.DPRank), wal.Position{Source: s.name + ranksMark, Seq: 1})
	}
	s.ranks[b.DPRank] = struct{}{}
	for i := range events {
		if events[i].EventID == 0 {
			events[i].EventID = seq
		}
	}
	if seq == 0 {
		s.zeroSum, s.haveZero = xxh3.Hash(payload), true
	}
	groups := s.dec.PartialGroups()
	if groups != s.groups {
		rankPos = append(rankPos, wal.Position{Source: s.name + groupsMark, Seq: groups})
	}
	if err := s.append(ctx, events, seq, tsMicros(b.TS, b.HasTS), clear, rankPos...); err != nil {
		return err
	}
	s.groups = groups
	return nil
}

// replayFrom is where a replay starts: at the next batch, or at the last
// one applied when the ts of the batches is known. The engine keeps its
// newest batches, so the same engine sends that batch back (a duplicate);
// a restarted engine already past that sequence sends one made after it,
// which tells the restart (see restarted), where the batches after it
// alone passed for the old engine's continuation.
func (s *ZMQSource) replayFrom() uint64 {
	if s.have && s.lastTS != 0 {
		return s.last
	}
	return s.next()
}

// restarted handles batch seq (live, or replayed) of an engine that
// restarted while its batches were not followed (kvidx away, or
// reconnecting): its sequence is at or below the last one applied, but its
// ts is later than the batches applied, so it is no duplicate. The old
// engine's blocks are gone: the worker is cleared before the new engine's
// first batch, which a replay from 0 fetches when the engine has a replay
// endpoint (the batches before seq are lost otherwise, a gap). It returns
// an error only when ctx ends.
func (s *ZMQSource) restarted(ctx context.Context, seq uint64, payload []byte, replayed bool) error {
	s.mu.Lock()
	s.stats.Resets++
	s.stats.HighestSeq = seq
	s.resets++
	s.mu.Unlock()
	s.log.Info("zmq publisher restarted (a batch at or below the last sequence applied, made after it): clearing the worker",
		"seq", seq, "last_seq", s.last)
	// The new engine's own clock takes over from the old one's.
	s.have, s.last, s.lastTS, s.pendingClear = false, 0, 0, true
	// One replay from 0 at a time: a replay endpoint that answers out of
	// order, each batch later than the last, made every replayed batch a
	// restart and nested replays without end (found by review); inside
	// one, the batches before seq are a gap. Nor does the batch that showed
	// the restart ask for another when that replay failed.
	if s.restartReplay {
		return s.apply(ctx, seq, payload, replayed)
	}
	s.restartReplay = true
	defer func() { s.restartReplay = false }()
	if s.spec.Replay != "" && seq > 0 {
		if err := s.replay(ctx, 0); err != nil {
			return err
		}
		if s.have && seq <= s.last {
			return nil // the replay applied it
		}
	}
	return s.apply(ctx, seq, payload, replayed)
}

// restartedBelow handles a replay asked from the last sequence applied
// that returned no batch at all: the engine that published that batch
// keeps its newest batches, so the one answering restarted while kvidx was
// away and has not reached that sequence. Without this, its blocks (and
// the old engine's) waited for its next live batch: an engine idle after
// its restart left the old engine's blocks held. The worker is cleared and
// the new engine's batches are taken from 0; when it has none yet, the
// clear is appended alone (the recorded position stays, so a restart of
// kvidx before the new engine's first batch finds the same). An engine
// that keeps no batch for replay looks the same (README: give it no replay
// endpoint). It returns an error only when ctx ends.
func (s *ZMQSource) restartedBelow(ctx context.Context) error {
	s.mu.Lock()
	s.stats.Resets++
	s.stats.HighestSeq = 0
	s.resets++
	s.mu.Unlock()
	s.log.Info("zmq publisher restarted (its replay holds no batch at the last sequence applied): clearing the worker", "last_seq", s.last)
	s.have, s.last, s.lastTS, s.pendingClear = false, 0, 0, true
	s.restartReplay = true
	defer func() { s.restartReplay = false }()
	if err := s.replay(ctx, 0); err != nil {
		return err
	}
	if !s.pendingClear {
		return nil // the first replayed batch cleared the worker
	}
	events := s.clearEvents(nil)
	if len(events) == 0 {
		return nil
	}
	var positions []wal.Position
	if s.markRanks {
		positions = append(positions, wal.Position{Source: s.name + ranksMark, Seq: 1})
	}
	if _, err := s.appendRetrying(ctx, events, positions, func() string { return "clearing the worker of a restarted engine" }); err != nil {
		return err
	}
	s.markRanks = false
	// The worker is empty: the new engine's first batch needs no clear of
	// its own (it counted a second one).
	s.pendingClear = false
	s.mu.Lock()
	s.stats.Clears++
	s.stats.Events += uint64(len(events))
	s.mu.Unlock()
	return nil
}

// appendRetrying appends events and positions as one WAL entry and returns
// the events' results. A refused append (the WAL overloaded, or fenced
// until an operator acts) is counted (ReasonAppend, what naming the
// append) and retried, the pause doubling from MinBackoff to MaxBackoff,
// until it succeeds or ctx ends (ctx's error).
func (s *ZMQSource) appendRetrying(ctx context.Context, events []engine.Event, positions []wal.Position, what func() string) ([]error, error) {
	backoff := s.opts.MinBackoff
	for {
		_, results, err := s.store.Append(ctx, events, positions)
		if err == nil {
			return results, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.fail(ReasonAppend, fmt.Errorf("%s: %w (retrying)", what(), err))
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, s.opts.MaxBackoff)
	}
}

// clearEvents returns the events that forget what this source applied: a
// Cleared event for every DP rank seen (plus rank, if given). With no rank
// known it returns none: every batch that applied events recorded its rank,
// so the source holds nothing, and the worker id's other ranks may be fed by
// other sources (one endpoint per DP rank is vLLM's usual layout), which a
// WorkerRemoved would wipe.
//
// While the ranks are unknown (ranksUnknown) it returns a WorkerRemoved
// event for the worker id instead, and forgets the ranks seen: the worker
// holds none of this source's blocks after it, and the ranks of the
// batches that follow are recorded again.
func (s *ZMQSource) clearEvents(rank *uint32) []engine.Event {
	if s.ranksUnknown {
		s.ranksUnknown, s.markRanks = false, true
		clear(s.ranks)
		return clearing(s.spec.WorkerID, nil, true)
	}
	ranks := make([]uint32, 0, len(s.ranks)+1)
	for r := range s.ranks {
		ranks = append(ranks, r)
	}
	if rank != nil {
		if _, ok := s.ranks[*rank]; !ok {
			ranks = append(ranks, *rank)
		}
	}
	slices.Sort(ranks)
	return clearing(s.spec.WorkerID, ranks, false)
}

// clearing returns the events that clear ranks of worker, in their order
// (none: no rank), or, with whole, the one that removes the worker id with
// all its ranks: what a source's clear and a start's clear of what an
// endpoint fed (see stillFed.clearOf) append.
func clearing(worker uint64, ranks []uint32, whole bool) []engine.Event {
	if whole {
		return []engine.Event{{Worker: engine.WorkerKey{WorkerID: worker}, Kind: engine.KindWorkerRemoved}}
	}
	if len(ranks) == 0 {
		return nil
	}
	evs := make([]engine.Event, len(ranks))
	for i, r := range ranks {
		evs[i] = engine.Event{Worker: engine.WorkerKey{WorkerID: worker, DPRank: r}, Kind: engine.KindCleared}
	}
	return evs
}

// append appends events with the position seq, the batch's ts in
// microseconds (0: none) and extra positions, retrying with backoff while the store refuses (overloaded, fenced), until
// ctx ends.
func (s *ZMQSource) append(ctx context.Context, events []engine.Event, seq, ts uint64, cleared bool, extra ...wal.Position) error {
	// The latest ts applied, not the last: an engine's clock stepped back
	// must not make an older batch look made after it (a restart); a batch
	// without one changes nothing (found by review: it reset the latest to
	// 0, and a clock stepped back after it made a duplicate a restart).
	newTS := max(s.lastTS, ts)
	positions := append([]wal.Position{{Source: s.name, Seq: seq}, {Source: s.name + tsMark, Seq: newTS}}, extra...)
	if !s.haveWorker || s.worker != s.spec.WorkerID {
		positions = append(positions, wal.Position{Source: s.name + workerMark, Seq: s.spec.WorkerID})
	}
	if s.reset {
		positions = append(positions, wal.Position{Source: s.name + resetMark, Seq: 0})
	}
	if s.markRanks {
		positions = append(positions, wal.Position{Source: s.name + ranksMark, Seq: 1})
	}
	results, err := s.appendRetrying(ctx, events, positions, func() string { return fmt.Sprintf("batch %d", seq) })
	if err != nil {
		return err
	}
	rejected := 0
	for _, r := range results {
		if r != nil {
			rejected++
		}
	}
	s.last, s.have, s.lastTS = seq, true, newTS
	s.worker, s.haveWorker, s.reset, s.markRanks = s.spec.WorkerID, true, false, false
	if cleared {
		s.pendingClear = false
	}
	s.mu.Lock()
	st := &s.stats
	st.HasSeq, st.LastSeq = true, seq
	st.LastBatch = time.Now()
	st.Batches++
	st.Events += uint64(len(events))
	st.Rejected += uint64(rejected)
	if cleared {
		st.Clears++
	}
	s.mu.Unlock()
	return nil
}

// replay asks the replay endpoint for every batch from start on and
// delivers them in order until the end marker (sequence -1). A replay that
// fails is counted and given up (later gaps ask again); it returns an error
// only when ctx ends.
func (s *ZMQSource) replay(ctx context.Context, start uint64) error {
	s.mu.Lock()
	s.stats.Replays++
	s.replayResets = s.resets
	s.mu.Unlock()
	s.log.Info("zmq replay requested", "replay", s.spec.Replay, "from_seq", start)
	// The reply reader below must be done when replay returns (Run
	// promises its goroutines are): deferred first, this wait runs last,
	// after cancel and Close have ended its Recv.
	var reader sync.WaitGroup
	defer reader.Wait()
	gctx, guard := guardedContext(ctx, s.opts.DialTimeout)
	dctx, cancel := context.WithCancel(gctx)
	defer cancel()
	dealer := zmq4.NewDealer(dctx, s.socketOptions()...)
	defer dealer.Close()
	err := dealer.Dial(s.guardedEndpoint(s.spec.Replay))
	if err == nil {
		guard.connected()
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.fail(ReasonReplay, fmt.Errorf("replay from %d: %w", start, err))
		return nil
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], start)
	if err := dealer.SendMulti(zmq4.NewMsgFrom([]byte{}, req[:])); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.fail(ReasonReplay, fmt.Errorf("replay from %d: send: %w", start, err))
		return nil
	}
	type reply struct {
		frames [][]byte
		err    error
	}
	replies := make(chan reply, 16)
	reader.Go(func() {
		for {
			m, err := dealer.Recv()
			select {
			case replies <- reply{m.Frames, err}:
			case <-dctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})
	timer := time.NewTimer(s.opts.ReplayTimeout)
	defer timer.Stop()
	n := 0
	for {
		var r reply
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			s.fail(ReasonReplay, fmt.Errorf("replay from %d: no reply for %v after %d batches", start, s.opts.ReplayTimeout, n))
			return nil
		case r = <-replies:
		}
		if r.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.fail(ReasonReplay, fmt.Errorf("replay from %d: %w", start, r.err))
			return nil
		}
		seq, payload, err := parseReplay(r.frames)
		if err != nil {
			s.fail(ReasonReplay, fmt.Errorf("replay from %d: %w", start, err))
			return nil
		}
		if seq == math.MaxUint64 {
			s.log.Info("zmq replay done", "from_seq", start, "batches", n)
			if n == 0 && s.have && s.lastTS != 0 && start == s.last && !s.restartReplay {
				return s.restartedBelow(ctx)
			}
			return nil
		}
		n++
		if err := s.deliver(ctx, seq, payload, true); err != nil {
			return err
		}
		timer.Reset(s.opts.ReplayTimeout)
	}
}

// parseReplay reads a replay reply: ["", seq, payload] (older engines) or
// ["", topic, seq, payload] (newer ones), the leading empty delimiter
// optional; seq -1 (all ones) ends the replay.
func parseReplay(frames [][]byte) (seq uint64, payload []byte, err error) {
	if len(frames) > 0 && len(frames[0]) == 0 {
		frames = frames[1:]
	}
	var seqFrame []byte
	switch len(frames) {
	case 1:
		seqFrame = frames[0]
	case 2:
		seqFrame, payload = frames[0], frames[1]
	case 3:
		seqFrame, payload = frames[1], frames[2]
	default:
		return 0, nil, fmt.Errorf("reply of %d frames", len(frames))
	}
	if len(seqFrame) != 8 {
		return 0, nil, fmt.Errorf("reply sequence frame of %d bytes, want 8", len(seqFrame))
	}
	seq = binary.BigEndian.Uint64(seqFrame)
	if seq != math.MaxUint64 && len(frames) == 1 {
		return 0, nil, errors.New("reply without a payload")
	}
	return seq, payload, nil
}
