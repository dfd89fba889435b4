package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/eventjson"
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
}

// Source consumes one stream into a store.
type Source struct {
	cfg   Config
	store Store
	log   *slog.Logger

	mu      sync.Mutex
	status  Status
	lastLog time.Time
}

// New returns a source; Run starts it.
func New(cfg Config, store Store) *Source {
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Source{cfg: cfg, store: store, log: cfg.Logger.With("source", PositionName(cfg.Stream)),
		status: Status{Errors: map[string]uint64{}}}
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

// applied returns the last stream sequence the store recorded for this source.
func (s *Source) applied() uint64 {
	_, positions := s.store.Applied()
	for _, p := range positions {
		if p.Source == PositionName(s.cfg.Stream) {
			return p.Seq
		}
	}
	return 0
}

// Run consumes until ctx ends, reconnecting with backoff after failures.
func (s *Source) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := s.session(ctx)
		s.update(func(st *Status) { st.Connected = false })
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("stream session ended; reconnecting", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// session connects and consumes until an error or ctx ends.
func (s *Source) session(ctx context.Context) error {
	nc, err := nats.Connect(s.cfg.URL, nats.Name("kvidx"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", s.cfg.URL, err)
	}
	defer nc.Close()
	jsc, err := js.New(nc)
	if err != nil {
		return err
	}
	stream, err := jsc.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
	}
	next := s.applied() + 1
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
		}
		first := info.State.FirstSeq
		if first <= next || info.State.Msgs == 0 && info.State.LastSeq < next {
			s.update(func(st *Status) { st.Gap = "" })
			break
		}
		gap := fmt.Sprintf("stream %s messages %d..%d are gone (the stream now starts at %d)", s.cfg.Stream, next, first-1, first)
		if s.cfg.AllowGap {
			s.log.Warn("skipping a gap in the stream (allowed)", "gap", gap)
			next = first
			s.update(func(st *Status) { st.Gap = "" })
			break
		}
		s.update(func(st *Status) { st.Gap = gap })
		s.log.Error("not applying: the stream has lost messages this replica never applied; restart with --nats-allow-gap to continue without them", "gap", gap)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
	cfg := js.OrderedConsumerConfig{DeliverPolicy: js.DeliverByStartSequencePolicy, OptStartSeq: next}
	if s.cfg.Subject != "" {
		cfg.FilterSubjects = []string{s.cfg.Subject}
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", s.cfg.Stream, err)
	}
	s.update(func(st *Status) { st.Connected, st.Applied = true, next-1 })
	for ctx.Err() == nil {
		batch, err := cons.Fetch(s.cfg.BatchMax, js.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return fmt.Errorf("fetching from %s: %w", s.cfg.Stream, err)
		}
		var (
			events  []engine.Event
			lastSeq uint64
			pending uint64
		)
		for msg := range batch.Messages() {
			meta, err := msg.Metadata()
			if err != nil {
				s.badMessage("metadata", err)
				continue
			}
			lastSeq, pending = meta.Sequence.Stream, meta.NumPending
			evs, err := eventjson.DecodeBatch(msg.Data())
			if err != nil {
				s.badMessage("decode", fmt.Errorf("message %d: %w", lastSeq, err))
				continue
			}
			events = append(events, evs...)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, js.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("fetching from %s: %w", s.cfg.Stream, err)
		}
		if lastSeq == 0 {
			continue
		}
		// The events and the position go in one WAL entry: applied exactly once.
		if _, _, err := s.store.Append(ctx, events, []wal.Position{{Source: PositionName(s.cfg.Stream), Seq: lastSeq}}); err != nil {
			return fmt.Errorf("appending messages up to %d: %w", lastSeq, err)
		}
		s.update(func(st *Status) { st.Applied, st.Lag = lastSeq, pending })
	}
	return nil
}

// badMessage counts a message that cannot be applied and logs at most once
// a second.
func (s *Source) badMessage(reason string, err error) {
	s.mu.Lock()
	s.status.Errors[reason]++
	logNow := time.Since(s.lastLog) >= time.Second
	if logNow {
		s.lastLog = time.Now()
	}
	s.mu.Unlock()
	if logNow {
		s.log.Warn("skipping a message", "reason", reason, "err", err)
	}
}
