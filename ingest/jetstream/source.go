package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
	"github.com/kvidx/kvidx/internal/loglimit"
	"github.com/kvidx/kvidx/wal"
)

// Store is what a source feeds: a durable, applied event log.
type Store interface {
	Append(ctx context.Context, events []engine.Event, positions []wal.Position) (uint64, []error, error)
	Applied() (uint64, []wal.Position)
}

// Config configures a [Source].
type Config struct {
	// URL of the NATS server, e.g. nats://127.0.0.1:4222.
	URL string
	// Stream is the JetStream stream name, e.g. KV_EVENTS.
	Stream string
	// Subject filters the stream, e.g. "kv.events.>"; empty: every subject.
	Subject string
	// AllowGap lets the source continue when messages it has not applied
	// are gone from the stream.
	AllowGap bool
	// BatchMax bounds the messages appended as one batch; default 256.
	BatchMax int
	// FetchMaxBytes bounds the bytes of one fetch (messages with their
	// subjects and headers), hence the memory a batch holds while it is
	// decoded and appended; default 64 MiB. A fetch asks for at least the
	// server's max payload plus 64 KiB, so that any message fits: one that
	// did not would never be delivered.
	FetchMaxBytes int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Status is a source's state, for readiness and metrics.
type Status struct {
	Connected bool
	// Applied is the stream sequence of the last message applied.
	Applied uint64
	// Lag is how many messages of the stream are not yet applied.
	Lag uint64
	// Gap, when not empty, says which messages are gone from the stream; the
	// source waits (not ready) unless it allows gaps.
	Gap string
	// Errors counts messages that did not decode, by reason.
	Errors map[string]uint64
	// LastError is why the last session ended ("" before any did): why
	// the source is not connected.
	LastError string
}

// Source consumes one stream into a store.
type Source struct {
	cfg   Config
	store Store
	log   *slog.Logger

	// minBackoff and maxBackoff bound the wait between sessions.
	minBackoff, maxBackoff time.Duration

	mu     sync.Mutex
	status Status
	// logs rate-limits the lines of bad messages, by reason.
	logs loglimit.Limiter

	warnedNarrow bool // the narrow-filter warning was logged (Run's goroutine only)
}

// New returns a source; Run starts it.
func New(cfg Config, store Store) *Source {
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = 256
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = DefaultFetchMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Source{cfg: cfg, store: store, log: cfg.Logger.With("source", PositionName(cfg.Stream)),
		minBackoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second,
		status: Status{Errors: map[string]uint64{}}, logs: loglimit.Limiter{Interval: time.Second}}
	// What the store recorded is applied before Run too (see session):
	// kvidx serve starts its sources only once a start's ZMQ clears have
	// landed, which a store refusing appends holds up for long, and
	// meanwhile a replica that had applied message N showed 0.
	s.status.Applied, _ = s.recorded()
	return s
}

// DefaultFetchMaxBytes is the default [Config.FetchMaxBytes].
const DefaultFetchMaxBytes = 64 << 20

// fetchBytes is the byte limit of a fetch from a server whose largest
// message payload is maxPayload: at least that payload plus room for a
// subject, a reply subject and protocol headers, because the server ends a
// fetch at a message over the limit without an error and would end every
// later one there too, stalling the source.
func fetchBytes(limit int, maxPayload int64) int {
	return int(max(int64(limit), maxPayload+64<<10))
}

// PositionName is the name under which a stream's position is recorded.
func PositionName(stream string) string { return "nats:" + stream }

// Status returns the source's state.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Errors = make(map[string]uint64, len(s.status.Errors))
	for k, v := range s.status.Errors {
		st.Errors[k] = v
	}
	return st
}

func (s *Source) update(f func(*Status)) {
	s.mu.Lock()
	f(&s.status)
	s.mu.Unlock()
}

// createdPositionName names the position under which a source records when
// the stream it reads was created (Unix nanoseconds), next to its sequence:
// a sequence only means something in the stream it was read from, and a
// deleted and recreated stream numbers its messages from 1 again.
func createdPositionName(stream string) string { return PositionName(stream) + ":created" }

// recorded returns the last stream sequence the store recorded for this
// source and when the stream it counts in was created (zero: not recorded,
// e.g. a log written before kvidx recorded it).
func (s *Source) recorded() (seq uint64, created time.Time) {
	_, positions := s.store.Applied()
	for _, p := range positions {
		switch p.Source {
		case PositionName(s.cfg.Stream):
			seq = p.Seq
		case createdPositionName(s.cfg.Stream):
			created = time.Unix(0, int64(p.Seq))
		}
	}
	return seq, created
}

// positions returns the positions recorded with messages up to seq of the
// stream described by info.
func (s *Source) positions(seq uint64, info *js.StreamInfo) []wal.Position {
	ps := []wal.Position{{Source: PositionName(s.cfg.Stream), Seq: seq}}
	if !info.Created.IsZero() {
		ps = append(ps, wal.Position{Source: createdPositionName(s.cfg.Stream), Seq: uint64(info.Created.UnixNano())})
	}
	return ps
}

// checkStart compares the recorded position (the last applied sequence and
// the creation time of its stream, zero if unknown) with the stream's state
// and returns, when the source cannot simply go on with the next message, a
// description of the gap, and whether the stream was reset (recreated, or
// emptied below the position) rather than merely trimmed at its front.
func checkStart(stream string, info *js.StreamInfo, applied uint64, created time.Time) (gap string, reset bool) {
	st, next := info.State, applied+1
	switch {
	case !created.IsZero() && !info.Created.IsZero() && !info.Created.Equal(created):
		return fmt.Sprintf("stream %s was recreated (created %s; the last message this replica applied, %d, was in the stream created %s): the new stream's messages before %d would be skipped",
			stream, info.Created.UTC().Format(time.RFC3339Nano), applied, created.UTC().Format(time.RFC3339Nano), next), true
	case st.LastSeq < applied:
		return fmt.Sprintf("stream %s ends at message %d, before message %d this replica applied last: it was recreated or reset, and its messages before %d would be skipped",
			stream, st.LastSeq, applied, next), true
	case st.FirstSeq > next && !(st.Msgs == 0 && st.LastSeq < next):
		return fmt.Sprintf("stream %s messages %d..%d are gone (the stream now starts at %d)", stream, next, st.FirstSeq-1, st.FirstSeq), false
	}
	return "", false
}

// Run consumes until ctx ends, reconnecting with backoff after failures.
func (s *Source) Run(ctx context.Context) error {
	backoff := s.minBackoff
	for {
		start := time.Now()
		err := s.session(ctx)
		var consumed bool
		s.update(func(st *Status) {
			consumed, st.Connected = st.Connected, false
			if err != nil {
				st.LastError = err.Error()
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		// The backoff grows while sessions keep failing; one that consumed
		// for longer than the longest wait was good, and the failure that
		// ended it starts afresh. (Not any session that got to consuming: one
		// failing right after would redial at the shortest wait for ever.)
		if consumed && time.Since(start) >= s.maxBackoff {
			backoff = s.minBackoff
		}
		s.log.Warn("stream session ended; reconnecting", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.maxBackoff)
	}
}

// appendBatch appends one batch (or positions alone), retrying with backoff while the store
// refuses it as overloaded (its commit queue full, or appends paused while
// its disk is nearly full): the session and the messages fetched stay, where
// ending the session would report the source disconnected and fetch them
// again. Other errors, and ctx ending, are returned.
func (s *Source) appendBatch(ctx context.Context, events []engine.Event, positions []wal.Position) error {
	backoff := s.minBackoff
	for refused := false; ; refused = true {
		_, _, err := s.store.Append(ctx, events, positions)
		if err == nil || !errors.Is(err, wal.ErrOverloaded) {
			if err == nil && refused {
				s.log.Info("the store takes appends again")
			}
			return err
		}
		if !refused {
			s.log.Warn("the store refuses appends; retrying the batch", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.maxBackoff)
	}
}

// session connects and consumes until an error or ctx ends.
func (s *Source) session(ctx context.Context) error {
	// What the store recorded is applied, whether or not the server can be
	// reached or a gap holds the source: a restarted replica that reported
	// 0 until it consumed again would look as if it had applied nothing.
	applied, created := s.recorded()
	s.update(func(st *Status) { st.Applied = applied })
	nc, err := nats.Connect(s.cfg.URL, nats.Name("kvidx"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", s.cfg.URL, err)
	}
	defer nc.Close()
	jsc, err := js.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream on %s: %w", s.cfg.URL, err)
	}
	stream, err := jsc.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
	}
	next := applied + 1
	var info *js.StreamInfo
	for {
		info, err = stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
		}
		// A filter no subject of the stream can match would consume
		// nothing and look healthy: a typo in --nats-subject.
		if subs := info.Config.Subjects; s.cfg.Subject != "" && len(subs) > 0 && !overlapsAny(s.cfg.Subject, subs) {
			return fmt.Errorf("subject %s matches none of stream %s's subjects (%s)", s.cfg.Subject, s.cfg.Stream, strings.Join(subs, ", "))
		}
		gap, reset := checkStart(s.cfg.Stream, info, applied, created)
		if gap == "" {
			s.update(func(st *Status) { st.Gap = "" })
			break
		}
		if s.cfg.AllowGap {
			s.log.Warn("skipping a gap in the stream (allowed)", "gap", gap)
			next = max(info.State.FirstSeq, 1)
			if reset || next-1 > applied {
				// Unlike a ZMQ engine's reset, which concerns one worker the
				// source can clear, a stream carries any number of workers'
				// events (next to other sources'), so what the old stream's
				// messages did cannot be undone here: like any gap, the
				// operator decides (AllowGap). Going on, the position must
				// count in the new stream from now on, durably: recorded only
				// with the next message, a restart before it would compare
				// the new stream with the old position again, and once the
				// new stream grew past it, skip its first messages silently.
				// A gap skipped in the same stream is recorded too: with no
				// message after it (a stream purged, or expired, while the
				// replica was down), the idle check would find the gap
				// again and end the session, over and over, and a restart
				// would report the gap already allowed.
				if err := s.appendBatch(ctx, nil, s.positions(next-1, info)); err != nil {
					return fmt.Errorf("recording the skipped gap of stream %s: %w", s.cfg.Stream, err)
				}
			}
			s.update(func(st *Status) { st.Gap = "" })
			break
		}
		// Every message the stream holds now is one this replica has not
		// applied (it starts past the position, or is a new stream): the
		// lag says how far behind the replica is held.
		lag, err := s.pendingFrom(ctx, stream, max(info.State.FirstSeq, 1))
		if err != nil {
			lag = info.State.Msgs
		}
		s.update(func(st *Status) { st.Gap, st.Lag = gap, lag })
		s.log.Error("not applying: the stream lost messages this replica never applied, or was recreated; restart with --nats-allow-gap to continue without them", "gap", gap)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
	// One attempt to recreate the consumer (the default is unlimited, with
	// backoff, deaf to ctx): if the stream is gone, Fetch fails and the next
	// session checks the stream again.
	cfg := js.OrderedConsumerConfig{DeliverPolicy: js.DeliverByStartSequencePolicy, OptStartSeq: next, MaxResetAttempts: 1}
	if s.cfg.Subject != "" {
		cfg.FilterSubjects = []string{s.cfg.Subject}
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", s.cfg.Stream, err)
	}
	s.update(func(st *Status) { st.Connected, st.Applied = true, next-1 })
	// The consumer skips messages removed from the stream (purged, expired,
	// dropped by its limits or deleted one by one) while this replica is
	// behind them, without a word: a jump in the stream sequences it
	// delivers is how they show. When the consumer sees every subject of the
	// stream, a jump is such a gap; with a narrower filter, the messages
	// jumped over may merely be other subjects', and the gap is told as at
	// startup: the message after the last one applied is no longer in the
	// stream.
	covers := true
	// narrowed notes the stream's subjects as of a look at it: once they
	// are wider than the filter, the session treats the filter as narrow
	// for good (the stream's subjects may be widened while it runs, another
	// source starting to share the stream, and a jump over the new
	// subjects' messages is no gap).
	//
	// It is also told by a message the consumer jumped over that is still in
	// the stream: a message on a subject the stream no longer lists (removed
	// from its subjects, its messages kept), which the filter need not
	// cover (found, the filter is treated as narrow: found != nil).
	narrowed := func(subjects []string, found *js.RawStreamMsg) {
		if !covers || (found == nil && coversStream(s.cfg.Subject, subjects)) {
			return
		}
		if found != nil && (s.cfg.Subject == "" || s.cfg.Subject == ">") {
			return // no filter: every message is delivered
		}
		covers = false
		if !s.warnedNarrow {
			// A removed message leaves no trace of its subject: a filtered
			// replica sees only the stream's front move, and cannot tell its
			// own messages removed behind it from other subjects'.
			s.warnedNarrow = true
			s.log.Warn("the subject filter is narrower than the stream's subjects: messages of this subject removed from the middle of the stream (a per-subject limit, a purge by subject, a delete) cannot be told from other subjects' and are not reported as gaps; give the events a stream of their own, or a filter covering all its subjects",
				"subject", s.cfg.Subject, "stream_subjects", strings.Join(subjects, ", "))
		}
	}
	narrowed(info.Config.Subjects, nil)
	prev := next - 1 // the stream sequence of the last message delivered
	// With a narrower filter the position moves only with this replica's
	// own messages, while other subjects' messages after it may be trimmed
	// from the stream's front: taken for a gap, that stopped a replica
	// that had lost nothing. So the position also moves, durably and with
	// no events, to a stream sequence up to which nothing of the subject is
	// left to apply: the stream's last sequence at a look taken after a
	// fetch (probed), once the next fetch comes back empty, confirming that
	// every message of the subject the stream held then was delivered
	// (seen).
	var probed, seen uint64
	var lastCheck time.Time
	// A fetch is limited in bytes, and one that comes back empty is
	// followed by a fetch of one message without the limit: the server ends
	// a limited fetch at a message larger than the limit without a word (a
	// message stored under a larger max payload than this server's, say)
	// and would end every later one there. Only that unlimited fetch
	// coming back empty tells that nothing is left.
	limited := true
	for ctx.Err() == nil {
		opts := []js.FetchOpt{js.FetchMaxWait(200 * time.Millisecond)}
		n := 1
		if limited {
			n, opts = s.cfg.BatchMax, append(opts, js.FetchMaxBytes(fetchBytes(s.cfg.FetchMaxBytes, nc.MaxPayload())))
		}
		batch, err := cons.Fetch(n, opts...)
		if err != nil {
			return fmt.Errorf("fetching from %s: %w", s.cfg.Stream, err)
		}
		var msgs []fetched
		for msg := range batch.Messages() {
			meta, err := msg.Metadata()
			if err != nil {
				s.badMessage("metadata", err)
				continue
			}
			msgs = append(msgs, fetched{seq: meta.Sequence.Stream, pending: meta.NumPending, data: msg.Data()})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, js.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("fetching from %s: %w", s.cfg.Stream, err)
		}
		if len(msgs) == 0 && limited {
			limited = false
			continue
		}
		limited = true
		if len(msgs) == 0 {
			seen, probed = max(seen, probed), 0
			// Idle: the ordered consumer recreates itself at the next
			// sequence after each fetch, even in a stream deleted and
			// recreated meanwhile; check, at most once a second, that the
			// stream is still the one the position counts in.
			if time.Since(lastCheck) >= time.Second {
				lastCheck = time.Now()
				now, err := stream.Info(ctx)
				if err != nil {
					return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
				}
				narrowed(now.Config.Subjects, nil)
				applied, _ := s.recorded()
				if gap, _ := checkStart(s.cfg.Stream, now, max(applied, seen), info.Created); gap != "" {
					return fmt.Errorf("stream %s changed under the consumer: %s", s.cfg.Stream, gap)
				}
				if seen > prev {
					if err := s.appendBatch(ctx, nil, s.positions(seen, info)); err != nil {
						return fmt.Errorf("recording messages up to %d as seen: %w", seen, err)
					}
					prev = seen
					s.update(func(st *Status) { st.Applied = seen })
				}
				if covers && now.State.LastSeq > prev && now.Created.Equal(info.Created) {
					// The consumer sees every subject and delivered nothing
					// after prev, yet the stream ends past it. If the
					// consumer, looked at after the stream, has nothing
					// pending either, the messages between were removed
					// (deleted one by one, purged by subject, at the end of
					// the stream) before this replica applied them: no later
					// message may come to show the jump.
					if ci, err := cons.Info(ctx); err == nil && ci.NumPending == 0 && ci.Delivered.Stream <= prev && !s.anyFrom(ctx, stream, prev+1, narrowed, now) {
						gap := fmt.Sprintf("stream %s messages %d..%d are gone (removed before this replica applied them)", s.cfg.Stream, prev+1, now.State.LastSeq)
						if !s.cfg.AllowGap {
							s.update(func(st *Status) { st.Gap, st.Lag = gap, 0 })
							s.log.Error("not applying: the stream lost messages this replica never applied; restart with --nats-allow-gap to continue without them", "gap", gap)
							s.holdLag(ctx, stream, prev+1)
							return nil
						}
						s.log.Warn("skipping a gap in the stream (allowed)", "gap", gap)
						last := now.State.LastSeq
						if err := s.appendBatch(ctx, nil, s.positions(last, info)); err != nil {
							return fmt.Errorf("recording messages up to %d as gone: %w", last, err)
						}
						prev = last
						s.update(func(st *Status) { st.Applied, st.Lag = last, 0 })
					}
				}
				if !covers && now.Created.Equal(info.Created) {
					probed = now.State.LastSeq
				}
			}
			continue
		}
		// Each fetch creates a new consumer at the sequence after the last
		// one delivered, in whatever stream now has the name: one deleted
		// and recreated under a busy replica goes on numbering from where
		// the old one was, past the new stream's first messages. Before
		// anything of the batch is applied, check that the stream is still
		// the one the position counts in (a stream's creation time is its
		// identity; a recreated one cannot have the old one's).
		now, err := stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
		}
		if !info.Created.IsZero() && !now.Created.Equal(info.Created) {
			applied, _ := s.recorded()
			gap, _ := checkStart(s.cfg.Stream, now, applied, info.Created)
			return fmt.Errorf("stream %s changed under the consumer: %s", s.cfg.Stream, gap)
		}
		// Subjects added to the stream before this look may have messages
		// in the batch's jumps.
		narrowed(now.Config.Subjects, nil)
		// This look at the stream came after the batch: if the next fetch
		// is empty, nothing of the subject up to its last sequence is left.
		probed = 0
		if !covers {
			probed = now.State.LastSeq
		}
		var (
			events  []engine.Event
			lastSeq uint64
			pending uint64
			held    string // a gap not allowed: nothing after it is applied
			heldLag uint64 // messages not applied, from the held one on
			heldSeq uint64 // the stream sequence of the held message
		)
		for i, m := range msgs {
			if m.seq > prev+1 {
				if covers && s.cfg.Subject != "" && s.cfg.Subject != ">" {
					// Unfiltered, the probe could narrow nothing: spare
					// the call (one per jump, say at each message a
					// per-subject limit left).
					s.stillThere(ctx, stream, prev+1, narrowed, now)
				}
				gap := ""
				if covers {
					gap = fmt.Sprintf("stream %s messages %d..%d are gone (removed before this replica applied them)", s.cfg.Stream, prev+1, m.seq-1)
				} else if first, from := now.State.FirstSeq, max(prev, seen)+1; first > from {
					gap = fmt.Sprintf("stream %s messages %d..%d are gone (the stream now starts at %d)", s.cfg.Stream, from, min(first, m.seq)-1, first)
				}
				if gap != "" {
					if !s.cfg.AllowGap {
						held = gap
						// Not applied: this message, the rest of the
						// batch and what the stream holds after it.
						heldLag = uint64(len(msgs)-i) + msgs[len(msgs)-1].pending
						heldSeq = m.seq
						break
					}
					s.log.Warn("skipping a gap in the stream (allowed)", "gap", gap)
				}
			}
			prev = m.seq
			lastSeq, pending = m.seq, m.pending
			evs, err := eventjson.DecodeBatch(m.data)
			if err != nil {
				reason := "decode"
				if errors.Is(err, eventjson.ErrOtherTier) {
					// Well formed, but of a host, disk or shared tier:
					// told apart from garbage for the operator.
					reason = "other_tier"
				}
				s.badMessage(reason, fmt.Errorf("message %d: %w", lastSeq, err))
				continue
			}
			events = append(events, evs...)
		}
		if lastSeq != 0 {
			// The events and the position go in one WAL entry: applied exactly once.
			if err := s.appendBatch(ctx, events, s.positions(lastSeq, info)); err != nil {
				return fmt.Errorf("appending messages up to %d: %w", lastSeq, err)
			}
			s.update(func(st *Status) { st.Applied, st.Lag = lastSeq, pending })
		}
		if held != "" {
			// As at startup: not ready, nothing skipped, until the
			// operator allows the gap (a restart with AllowGap).
			s.update(func(st *Status) { st.Gap, st.Lag = held, heldLag })
			s.log.Error("not applying: the stream lost messages this replica never applied; restart with --nats-allow-gap to continue without them", "gap", held)
			s.holdLag(ctx, stream, heldSeq)
			return nil
		}
	}
	return nil
}

// holdLag waits, held by a gap, until ctx ends, keeping the lag at the
// number of messages of the subject from stream sequence from on (none of
// them is applied while held), as more arrive.
func (s *Source) holdLag(ctx context.Context, stream js.Stream, from uint64) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.pendingFrom(ctx, stream, from); err == nil {
			s.update(func(st *Status) { st.Lag = n })
		}
	}
}

// pendingFrom counts the messages of the subject the stream holds from
// sequence seq on, with a short-lived consumer (the ordered one's may have
// been removed for inactivity while held).
func (s *Source) pendingFrom(ctx context.Context, stream js.Stream, seq uint64) (uint64, error) {
	cfg := js.ConsumerConfig{DeliverPolicy: js.DeliverByStartSequencePolicy, OptStartSeq: seq, AckPolicy: js.AckNonePolicy,
		InactiveThreshold: 30 * time.Second, MemoryStorage: true, Replicas: 1}
	if s.cfg.Subject != "" {
		cfg.FilterSubject = s.cfg.Subject
	}
	c, err := stream.CreateConsumer(ctx, cfg)
	if err != nil {
		return 0, err
	}
	ci := c.CachedInfo()
	_ = stream.DeleteConsumer(ctx, ci.Name)
	return ci.NumPending, nil
}

// stillThere reports whether message seq, which a consumer that covers the
// stream's subjects did not deliver, is still in the stream (on a subject
// the stream no longer lists), and if so narrows the session's filter.
// Only a message not found was removed: a probe that failed (a timeout, a
// denied get) tells nothing, and the message is taken as still there (the
// next look decides). A message found on a subject the filter matches is
// one the consumer is about to deliver (the server counts a new message
// into a consumer's pending after storing it, asynchronously): no gap, and
// no sign of a narrow filter.
func (s *Source) stillThere(ctx context.Context, stream js.Stream, seq uint64, narrowed func([]string, *js.RawStreamMsg), now *js.StreamInfo) bool {
	m, err := stream.GetMsg(ctx, seq)
	return s.found(m, err, narrowed, now)
}

// anyFrom reports whether the stream holds a message at seq or after it,
// as stillThere does of seq alone. The idle check declares seq..LastSeq
// gone only when none is left: seq's absence alone proves nothing of the
// messages after it, and one stored just before the check may not be
// counted in the consumer's pending yet (the server counts asynchronously),
// so a gap declared to LastSeq would record a message about to be
// delivered as gone.
func (s *Source) anyFrom(ctx context.Context, stream js.Stream, seq uint64, narrowed func([]string, *js.RawStreamMsg), now *js.StreamInfo) bool {
	m, err := stream.GetMsg(ctx, seq, js.WithGetMsgSubject(">"))
	return s.found(m, err, narrowed, now)
}

// found is stillThere's and anyFrom's verdict on a probe's answer.
func (s *Source) found(m *js.RawStreamMsg, err error, narrowed func([]string, *js.RawStreamMsg), now *js.StreamInfo) bool {
	if err != nil {
		return !errors.Is(err, js.ErrMsgNotFound)
	}
	if s.cfg.Subject == "" || subjectCovers(s.cfg.Subject, m.Subject) {
		return true
	}
	narrowed(now.Config.Subjects, m)
	return true
}

// fetched is a message read from the stream, waiting to be applied.
type fetched struct {
	seq, pending uint64
	data         []byte
}

// coversStream reports whether a consumer filtered by filter (empty: none)
// receives every message of a stream bound to subjects.
func coversStream(filter string, subjects []string) bool {
	if filter == "" || filter == ">" {
		return true
	}
	if len(subjects) == 0 {
		return false
	}
	for _, subj := range subjects {
		if !subjectCovers(filter, subj) {
			return false
		}
	}
	return true
}

// anyCovers reports whether one of the patterns subjects matches every
// subject the pattern subj matches.
func anyCovers(subjects []string, subj string) bool {
	for _, s := range subjects {
		if subjectCovers(s, subj) {
			return true
		}
	}
	return false
}

// overlapsAny reports whether some subject matches both the pattern filter
// and one of the patterns subjects.
func overlapsAny(filter string, subjects []string) bool {
	for _, subj := range subjects {
		if subjectsOverlap(filter, subj) {
			return true
		}
	}
	return false
}

// subjectsOverlap reports whether some subject matches both patterns.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) || i == len(bt):
			return len(at) == len(bt)
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] != "*" && bt[i] != "*" && at[i] != bt[i]:
			return false
		}
	}
}

// subjectCovers reports whether every subject matching the pattern subj
// also matches the pattern filter.
func subjectCovers(filter, subj string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subj, ".")
	for i, f := range ft {
		if f == ">" {
			return i < len(st)
		}
		if i >= len(st) || st[i] == ">" {
			return false
		}
		if f != "*" && f != st[i] {
			return false
		}
	}
	return len(ft) == len(st)
}

// badMessage counts a message that cannot be applied and logs at most once
// a second for each reason, with the count of those of that reason it did
// not log (a flood of garbage does not hide a message of another tier).
func (s *Source) badMessage(reason string, err error) {
	s.mu.Lock()
	s.status.Errors[reason]++
	s.mu.Unlock()
	if ok, suppressed := s.logs.Allow(reason, time.Now()); ok {
		s.log.Warn("skipping a message", "reason", reason, "err", err, "suppressed_since_last", suppressed)
	}
}
