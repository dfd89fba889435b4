package node

import (
	"log/slog"
	"time"
)

// Config configures a [Server]. Use [DefaultConfig] and change what differs:
// zero sizes and timeouts are replaced by their defaults, but zero snapshot
// triggers mean "disabled" and FinalSnapshot is taken literally.
type Config struct {
	// MaxBodyBytes bounds a request body (--max-body-bytes); default 16 MiB.
	MaxBodyBytes int64
	// MaxEventBytesInFlight bounds the body bytes of the event posts being
	// read, decoded and appended at once (--max-inflight-event-bytes); a
	// post past it answers 503 with Retry-After. Default 256 MiB.
	MaxEventBytesInFlight int64
	// DefaultBlockSize is the block size of a token query that names none;
	// default 16.
	DefaultBlockSize int
	// SnapshotEveryEvents triggers a snapshot once this many events were
	// appended since the last one (--snapshot-every-events); 0 disables.
	SnapshotEveryEvents uint64
	// SnapshotInterval triggers a snapshot this long after the last one when
	// the index changed since (--snapshot-interval); 0 disables.
	SnapshotInterval time.Duration
	// SnapshotRetry is the pause after a failed snapshot before the loop
	// tries again; default 30s.
	SnapshotRetry time.Duration
	// FinalSnapshot takes a snapshot at shutdown when the index changed since
	// the last one (--final-snapshot).
	FinalSnapshot bool
	// ShutdownTimeout bounds the wait for in-flight requests at shutdown;
	// default 30s.
	ShutdownTimeout time.Duration
	// MaxConns bounds the connections served at once (--max-conns); one
	// past it is answered a plain-text 503 and closed. Default: the
	// process's open-file limit less a reserve of an eighth of it (at
	// least 256) for the WAL, snapshots and event sources, so that idle
	// connections cannot take the descriptors the WAL needs; but at least
	// half the limit, and at most fasthttp's own default, 262,144 (see
	// maxConnsFor).
	MaxConns int
	// ReadTimeout (a whole request, header and body), WriteTimeout and
	// IdleTimeout (a keep-alive connection between requests) bound the
	// HTTP server's connections; defaults 60s, 60s, 120s.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Logger receives the server's logs; default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults of `kvidx serve`.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:          16 << 20,
		MaxEventBytesInFlight: 256 << 20,
		DefaultBlockSize:      16,
		MaxConns:              maxConnsFor(openFileLimit()),
		SnapshotEveryEvents:   1_000_000,
		SnapshotInterval:      10 * time.Minute,
		SnapshotRetry:         30 * time.Second,
		FinalSnapshot:         true,
		ShutdownTimeout:       30 * time.Second,
		ReadTimeout:           60 * time.Second,
		WriteTimeout:          60 * time.Second,
		IdleTimeout:           120 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDefault(&c.MaxBodyBytes, d.MaxBodyBytes)
	setDefault(&c.MaxEventBytesInFlight, d.MaxEventBytesInFlight)
	setDefault(&c.DefaultBlockSize, d.DefaultBlockSize)
	setDefault(&c.MaxConns, d.MaxConns)
	setDefault(&c.SnapshotRetry, d.SnapshotRetry)
	setDefault(&c.ShutdownTimeout, d.ShutdownTimeout)
	setDefault(&c.ReadTimeout, d.ReadTimeout)
	setDefault(&c.WriteTimeout, d.WriteTimeout)
	setDefault(&c.IdleTimeout, d.IdleTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
