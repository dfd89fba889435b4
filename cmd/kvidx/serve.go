package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/ingest"
	"github.com/kvidx/kvidx/ingest/jetstream"
	"github.com/kvidx/kvidx/node"
	"github.com/kvidx/kvidx/recovery"
	"github.com/kvidx/kvidx/wal"
)

type serveFlags struct {
	dataDir        string
	listen         string
	sync           string
	syncInterval   time.Duration
	blockSize      int
	snapshotEvents uint64
	snapshotEvery  time.Duration
	keepSnapshots  int
	logFormat      string
	maxBodyBytes   int64
	maxInflight    int64
	maxConns       int
	finalSnapshot  bool
	natsURL        string
	natsStream     string
	natsSubject    string
	natsAllowGap   bool
	natsFetchBytes int
	zmq            []string
	reserveBlocks  int
	reserveWorkers int
}

func newServeCmd() *cobra.Command {
	f := serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a router node: recover the index, then serve the HTTP API",
		Long: `Serve recovers the index of --data-dir (the newest good snapshot plus the
write-ahead log after it; a missing directory starts a new index), then serves
the HTTP API on --listen:

  POST   /v1/events            NDJSON or a JSON array of KV-cache events
  POST   /v1/match             {"tokens":[...]} or {"local_hashes":[...]}
  GET    /v1/workers           blocks per worker key
  DELETE /v1/workers/{id}      forget a worker (logged like any event)
  GET    /v1/stats             index size, counters, WAL and snapshot state
  POST   /v1/snapshot          take a snapshot now
  GET    /healthz, /readyz     liveness; readiness (after recovery)
  GET    /metrics              Prometheus metrics

An event request is acknowledged once it is durable under --sync and applied.
Snapshots are taken every --snapshot-every-events events (those a restart
replayed from the WAL count too) and every --snapshot-interval (when
something changed), and at shutdown (SIGTERM or
SIGINT, when the index changed since the last one) unless
--final-snapshot=false. A shutdown waits up to 30 s for
requests in flight; requests whose bodies have not arrived by then are
dropped unanswered (nothing of them was acknowledged). The exit status is 1
when the WAL was fenced (a write or fsync failed), a batch was still being
written when the wait ended, or the final snapshot failed (not for lack of
room on a nearly full disk: the next start then replays the WAL); else 0.
A second SIGTERM or SIGINT, during the shutdown or recovery, ends the process
at once (killed by that signal; nothing acknowledged is lost).

Before the WAL can fill its filesystem, ingest pauses: while less is free
than a snapshot of the index and the WAL's next entries need, events get 503
with Retry-After ("ingest paused"), /readyz says ingest_paused (during the
start's ZMQ clears too, which the pause holds up), a snapshot is
taken if the index changed (its retention may free WAL segments), and ingest
resumes by itself once space is back (see /v1/stats disk_free_bytes and
disk_floor_bytes).

With --zmq (repeatable), the node subscribes to vLLM engines' ZMQ KV-event
publishers, hashing each block's tokens itself; it applies each engine's
batches in sequence order, asks the replay socket for missed ones, drops
duplicates, clears a worker whose engine restarted (told by a sequence 0, or
by a batch at or below the last applied made after it: its ts), and records
the last applied sequence and ts in the WAL so a restart resumes with the next
batch. An endpoint given another worker id than the WAL records clears what it
fed the old id at start; the new id starts from nothing.

With --nats-url, the node also consumes a NATS JetStream stream of events
(each message one event or an NDJSON batch) with its own ordered consumer,
resuming after the last message its own WAL recorded: replicas fed by one
stream hold the same index. Lost messages (expired or purged before this node
applied them, or a stream deleted and recreated) keep the node not ready
unless --nats-allow-gap.

With --reserve-blocks and --reserve-workers (the workers' KV cache sizes
summed, and how many worker keys, worker id and DP rank pairs, there are), the
index is sized for them at start: while it fills it then mostly neither
resizes its tables nor maps fresh memory (events apply faster), and it keeps
that memory (about 55 bytes a holder-block) when it empties.

Every flag can also be set by an environment variable: KVIDX_ and the flag
name in upper case with _ for -, e.g. KVIDX_DATA_DIR=/var/lib/kvidx
(KVIDX_ZMQ: endpoints separated by spaces).`,
		Example: `  kvidx serve
  kvidx serve --data-dir /var/lib/kvidx --listen 127.0.0.1:8585 --sync always
  curl -s localhost:8585/v1/match -d '{"local_hashes":[101,102]}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fromEnv, err := serveFlagsFromEnv(cmd)
			if err != nil {
				return err
			}
			return fromEnv.explain(runServe(cmd, f))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "./kvidx-data", "data directory (write-ahead log, snapshots)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8585", "address of the HTTP API")
	fl.StringVar(&f.sync, "sync", "always", "WAL sync policy: always (fsync before acknowledging), interval, none")
	fl.DurationVar(&f.syncInterval, "sync-interval", 5*time.Millisecond, "longest time between fsyncs under --sync interval")
	fl.IntVar(&f.blockSize, "block-size", 16, "tokens per block of a token query that names no block_size")
	fl.Uint64Var(&f.snapshotEvents, "snapshot-every-events", 1_000_000, "take a snapshot after this many events (0: never)")
	fl.DurationVar(&f.snapshotEvery, "snapshot-interval", 10*time.Minute, "take a snapshot this often when the index changed (0: never)")
	fl.IntVar(&f.keepSnapshots, "keep-snapshots", 2, "snapshots kept; the WAL is truncated only up to the oldest kept one")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.Int64Var(&f.maxBodyBytes, "max-body-bytes", 16<<20, "largest request body accepted")
	fl.Int64Var(&f.maxInflight, "max-inflight-event-bytes", 256<<20, "bytes of event post bodies read, decoded and appended at once (each post holds a few times its body in memory); a post past it answers 503 with Retry-After")
	fl.IntVar(&f.maxConns, "max-conns", 0, "connections served at once; one past it gets a 503 and is closed (0: the open-file limit less an eighth of it, at least 256, kept for the WAL, snapshots and event sources; at least half the limit, at most 262144)")
	fl.BoolVar(&f.finalSnapshot, "final-snapshot", true, "take a snapshot at shutdown when the index changed since the last one")
	fl.StringArrayVar(&f.zmq, "zmq", nil, "consume a vLLM engine's KV events: tcp://HOST:5557=WORKER_ID[,replay=tcp://HOST:5558] (repeatable)")
	fl.StringVar(&f.natsURL, "nats-url", "", "consume KV events from this NATS server's JetStream stream (e.g. nats://127.0.0.1:4222)")
	fl.StringVar(&f.natsStream, "nats-stream", "KV_EVENTS", "JetStream stream to consume")
	fl.StringVar(&f.natsSubject, "nats-subject", "kv.events.>", "subjects of the stream to consume")
	fl.IntVar(&f.reserveBlocks, "reserve-blocks", 0, "size the index at start for this many holder-blocks, all workers' cached blocks together (0: grow as needed); needs --reserve-workers")
	fl.IntVar(&f.reserveWorkers, "reserve-workers", 0, "worker keys (worker id and DP rank pairs) the reservation of --reserve-blocks is for")
	fl.IntVar(&f.natsFetchBytes, "nats-fetch-max-bytes", jetstream.DefaultFetchMaxBytes, "bytes of stream messages fetched and appended as one batch, at most (raised to the server's max payload so that any message fits)")
	fl.BoolVar(&f.natsAllowGap, "nats-allow-gap", false, "continue when stream messages this node never applied are gone (expired, purged, or the stream deleted and recreated)")
	return cmd
}

// serveFlagsFromEnv is flagsFromEnv for serve's own flags: not the ones
// cmd.Flags() also holds once cobra ran, --help and the root's --cpuprofile
// (KVIDX_HELP=maybe refused to start the server, and KVIDX_CPUPROFILE was
// taken after the profile would have started, so it made none).
func serveFlagsFromEnv(cmd *cobra.Command) (envFlags, error) {
	own := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.LocalNonPersistentFlags().VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "help" {
			own.AddFlag(fl)
		}
	})
	return flagsFromEnv(own)
}

// flagsFromEnv sets every flag not given on the command line from its
// KVIDX_ environment variable, if set, and returns which it set. A
// repeatable flag (--zmq) takes one value per whitespace-separated field:
// its values hold no spaces, and commas are already part of them
// (",replay=").
func flagsFromEnv(fs *pflag.FlagSet) (envFlags, error) {
	var errs []error
	set := envFlags{}
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed {
			return
		}
		name := flagEnvName(fl.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		values := []string{v}
		if fl.Value.Type() == "stringArray" {
			values = strings.Fields(v)
		}
		for _, value := range values {
			if err := fs.Set(fl.Name, value); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
		set[fl.Name] = name
	})
	return set, errors.Join(errs...)
}

// flagEnvName is the environment variable of serve's flag name:
// KVIDX_ and the name in upper case with _ for -.
func flagEnvName(name string) string {
	return "KVIDX_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envFlags maps the flags set from the environment to their variables.
type envFlags map[string]string

// explain adds to an error that names a flag set from the environment
// where its value came from: an operator who never typed --sync looks
// for it on no command line (found by an audit).
func (e envFlags) explain(err error) error {
	if err == nil {
		return nil
	}
	var from []string
	for name, env := range e {
		if namesFlag(err.Error(), name) {
			from = append(from, env)
		}
	}
	if len(from) == 0 {
		return err
	}
	slices.Sort(from)
	return fmt.Errorf("%w (set by the environment: %s)", err, strings.Join(from, ", "))
}

// namesFlag reports whether msg names --name (not a longer flag it begins).
func namesFlag(msg, name string) bool {
	for rest := msg; ; {
		i := strings.Index(rest, "--"+name)
		if i < 0 {
			return false
		}
		rest = rest[i+2+len(name):]
		if rest == "" || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz-", rune(rest[0])) {
			return true
		}
	}
}

// check refuses flag values the server would otherwise replace by its
// defaults without a word (the node and recovery take 0 for "default").
func (f serveFlags) check() error {
	switch {
	case f.dataDir == "":
		// filepath.Clean("") is ".": the current directory would become
		// a data directory.
		return fmt.Errorf("serve: --data-dir is empty: name a directory (default ./kvidx-data)")
	case f.blockSize < 1:
		return fmt.Errorf("serve: --block-size %d: want at least 1", f.blockSize)
	case f.keepSnapshots < 1:
		return fmt.Errorf("serve: --keep-snapshots %d: want at least 1", f.keepSnapshots)
	case f.maxBodyBytes < 1:
		return fmt.Errorf("serve: --max-body-bytes %d: want at least 1", f.maxBodyBytes)
	case f.maxInflight < 1:
		return fmt.Errorf("serve: --max-inflight-event-bytes %d: want at least 1", f.maxInflight)
	case f.maxConns < 0:
		return fmt.Errorf("serve: --max-conns %d: want 0 (from the open-file limit) or more", f.maxConns)
	case f.natsFetchBytes < 1:
		return fmt.Errorf("serve: --nats-fetch-max-bytes %d: want at least 1", f.natsFetchBytes)
	case f.syncInterval <= 0:
		return fmt.Errorf("serve: --sync-interval %v: want a positive duration", f.syncInterval)
	case f.snapshotEvery < 0:
		return fmt.Errorf("serve: --snapshot-interval %v: want 0 (never) or a positive duration", f.snapshotEvery)
	case f.reserveBlocks < 0 || f.reserveWorkers < 0:
		return fmt.Errorf("serve: --reserve-blocks %d, --reserve-workers %d: want 0 or more", f.reserveBlocks, f.reserveWorkers)
	case f.reserveBlocks > engine.MaxReservedHolderBlocks || f.reserveWorkers > engine.MaxWorkerKeys:
		return fmt.Errorf("serve: --reserve-blocks %d, --reserve-workers %d: want at most %d and %d", f.reserveBlocks, f.reserveWorkers, engine.MaxReservedHolderBlocks, engine.MaxWorkerKeys)
	case (f.reserveBlocks > 0) != (f.reserveWorkers > 0):
		return fmt.Errorf("serve: --reserve-blocks %d, --reserve-workers %d: give both, or neither", f.reserveBlocks, f.reserveWorkers)
	}
	return checkReservation("serve: --reserve-blocks", f.reserveBlocks)
}

// beforeClearsKey is the context key of a func(context.Context) that
// serve, when its command's context holds one, calls before its start's
// clears of what ZMQ endpoints fed (with their context): tests hold the
// clears open with it.
type beforeClearsKey struct{}

func runServe(cmd *cobra.Command, f serveFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	if f.natsURL == "" {
		// Without a NATS source these would be ignored without a word.
		for _, name := range []string{"nats-stream", "nats-subject", "nats-allow-gap", "nats-fetch-max-bytes"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("serve: --%s needs --nats-url (it configures the NATS JetStream source)", name)
			}
		}
	}
	var handler slog.Handler
	switch f.logFormat {
	case "text":
		handler = slog.NewTextHandler(cmd.ErrOrStderr(), nil)
	case "json":
		handler = slog.NewJSONHandler(cmd.ErrOrStderr(), nil)
	default:
		return fmt.Errorf("serve: --log-format %q: want text or json", f.logFormat)
	}
	log := slog.New(handler)
	policy, err := wal.ParseSyncPolicy(f.sync)
	if err != nil {
		return fmt.Errorf("serve: --sync: %w", err)
	}
	if policy == wal.SyncNone {
		log.Warn("--sync none: acknowledged events are not fsynced and an OS crash or power loss can lose them; use it for tests and benchmarks only")
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		// An empty value (KVIDX_LISTEN=) would bind every interface on a
		// random port, past the loopback warning below.
		return fmt.Errorf("serve: --listen %q: want HOST:PORT", f.listen)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		log.Warn("the HTTP API has no authentication and listens beyond loopback", "listen", f.listen)
	}
	var specs []ingest.ZMQSpec
	for _, z := range f.zmq {
		spec, err := ingest.ParseZMQSpec(z)
		if err != nil {
			return fmt.Errorf("serve: --zmq %q: %w", z, err)
		}
		// A source's WAL position and metrics are named by its endpoint:
		// two sources of one endpoint would share a position and break
		// /metrics.
		for _, o := range specs {
			if o.Endpoint == spec.Endpoint {
				return fmt.Errorf("serve: --zmq %q: endpoint %s is given twice", z, spec.Endpoint)
			}
		}
		specs = append(specs, spec)
	}
	if f.natsURL != "" {
		if err := jetstream.CheckURL(f.natsURL); err != nil {
			return fmt.Errorf("serve: --nats-url: %w", err)
		}
		if err := jetstream.CheckStream(f.natsStream); err != nil {
			return fmt.Errorf("serve: --nats-stream: %w", err)
		}
		if f.natsSubject != "" { // empty: every subject of the stream
			if err := jetstream.CheckSubject(f.natsSubject); err != nil {
				return fmt.Errorf("serve: --nats-subject: %w", err)
			}
		}
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	cfg := node.DefaultConfig()
	cfg.MaxBodyBytes = f.maxBodyBytes
	cfg.MaxEventBytesInFlight = f.maxInflight
	if f.maxConns > 0 {
		cfg.MaxConns = f.maxConns
	}
	cfg.DefaultBlockSize = f.blockSize
	cfg.SnapshotEveryEvents = f.snapshotEvents
	cfg.SnapshotInterval = f.snapshotEvery
	cfg.FinalSnapshot = f.finalSnapshot
	cfg.Logger = log
	srv := node.New(cfg)
	srv.SetStarting("recovering " + f.dataDir)
	// Serve /healthz and /readyz while recovery runs. The server's shutdown
	// begins only once recovery has ended (runCtx): a signal during a
	// recovery that completes anyway must find the store set, so that the
	// shutdown takes its final snapshot and the next start replays nothing.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	served := make(chan error, 1)
	go func() { served <- srv.Run(runCtx, ln) }()
	// Once a first SIGTERM or SIGINT has come, a second takes the default
	// action and ends the process at once, during recovery too: a step
	// that does not heed the signal (reserving the index's memory, a read
	// that blocks) can still be cut short without SIGKILL (found by
	// review: during recovery the second signal was caught and ignored).
	go func() {
		<-ctx.Done()
		stop() // before the log line, which then holds when it is read
		// Only a signal begins a shutdown: not stop on a start that failed
		// (a locked data directory, a refusal), which logged this line
		// before its error, nor the end of serve.
		if context.Cause(ctx) != context.Canceled && cmd.Context().Err() == nil {
			log.Info("shutting down; a second SIGTERM or SIGINT stops at once")
		}
	}()

	store, err := recovery.Open(ctx, f.dataDir, recovery.Options{
		Sync:          policy,
		SyncInterval:  f.syncInterval,
		KeepSnapshots: f.keepSnapshots,
		Logger:        log,
		WrapStore:     node.NewWALInstrument(srv.Metrics(), nil),

		ReserveHolderBlocks: f.reserveBlocks,
		ReserveWorkerKeys:   f.reserveWorkers,
	})
	if err != nil {
		stop()
		stopRun()
		if runErr := <-served; errors.Is(err, context.Canceled) && ctx.Err() != nil && runErr == nil {
			// SIGTERM or SIGINT during recovery: a clean stop, nothing
			// acknowledged was at stake (the WAL holds it all).
			log.Info("stopped during recovery")
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	}
	rep := store.Report()
	srv.Metrics().ObserveRecovery(rep.Duration, int(rep.ReplayedEntries))
	if rep.SnapshotUsed.Path != "" {
		if fi, err := os.Stat(rep.SnapshotUsed.Path); err == nil {
			srv.SetLastSnapshot(rep.SnapshotUsed.Index, fi.ModTime())
		}
	}
	var runs []func(context.Context) error
	var zmqSources []*ingest.ZMQSource
	for _, spec := range specs {
		src := ingest.NewZMQSource(spec, srv.SourceStore(store), ingest.ZMQOptions{Logger: log})
		srv.AddSource(func() node.SourceStatus {
			st := src.Stats()
			return node.SourceStatus{Name: st.Source, Connected: st.Connected, Applied: st.LastSeq, Lag: st.Lag, Errors: st.Errors, LastError: st.LastConnError,
				Skipped: map[string]uint64{"other_medium": st.OtherMedium, "other_group": st.OtherGroup}}
		})
		zmqSources = append(zmqSources, src)
		runs = append(runs, src.Run)
	}
	if f.natsURL != "" {
		src := jetstream.New(jetstream.Config{URL: f.natsURL, Stream: f.natsStream, Subject: f.natsSubject, AllowGap: f.natsAllowGap, FetchMaxBytes: f.natsFetchBytes, Logger: log}, srv.SourceStore(store))
		srv.AddSource(func() node.SourceStatus {
			st := src.Status()
			return node.SourceStatus{Name: jetstream.PositionName(f.natsStream), Connected: st.Connected, Applied: st.Applied, Lag: st.Lag, Problem: st.Gap, Errors: st.Errors, LastError: st.LastError}
		})
		runs = append(runs, src.Run)
	}
	// Every ZMQ endpoint the WAL records that is configured no more
	// (removed, or spelled otherwise) clears what it fed, and every one
	// whose worker id changed clears what it fed the old id, before any
	// source or event post applies anything: with ids swapped between two
	// endpoints, or an endpoint renamed, one source's clear would otherwise
	// wipe what another had just applied, and an event posted for such an
	// id would be acknowledged and then cleared. Meanwhile event posts get
	// 503 with Retry-After and /readyz is not ready, with or without a
	// source (the removed endpoints are cleared all the same). The clears
	// run on a source loop: a shutdown ends them, and still takes its final
	// snapshot (the store is set).
	hold, _ := cmd.Context().Value(beforeClearsKey{}).(func(context.Context))
	srv.SetStorePreparing(store, "clearing what ZMQ endpoints fed worker ids they feed no more", func(ctx context.Context) error {
		if hold != nil {
			hold(ctx)
		}
		if err := ingest.ForgetRemovedZMQ(ctx, srv.SourceStore(store), ingest.ZMQOptions{Logger: log}, zmqSources...); err != nil {
			return err // the shutdown has begun
		}
		return ingest.ReconcileZMQ(ctx, zmqSources...)
	}, func() {
		for _, run := range runs {
			srv.GoSource(run)
		}
		if ctx.Err() == nil { // else the shutdown has begun
			msg := "ready"
			if len(specs) > 0 || f.natsURL != "" {
				// Not ready for a router until the sources connect.
				msg = "index recovered; /readyz answers ready once the sources connect"
			}
			log.Info(msg, "data_dir", f.dataDir, "listen", ln.Addr().String(), "snapshot", rep.SnapshotUsed.Path,
				"replayed_entries", rep.ReplayedEntries, "duration", rep.Duration)
		}
	})
	// The signal begins the shutdown (see above for a second one): a drain
	// held up by a slow client or a long final snapshot can still be cut
	// short without SIGKILL. Nothing acknowledged is lost (the WAL holds
	// it; an interrupted snapshot's temporary file is removed at the next
	// start). (A signal during recovery ends it: recovery.Open returns, or,
	// if it had finished, the shutdown begins here at once.)
	go func() {
		<-ctx.Done()
		stopRun()
	}()
	runErr := <-served // Run has stopped the sources: the store can close
	if err := store.Close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if runErr != nil {
		return fmt.Errorf("serve: %w", runErr)
	}
	log.Info("stopped")
	return nil
}
