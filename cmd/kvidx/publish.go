package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/ingest/jetstream"
	"github.com/kvidx/kvidx/workload"
)

func newPublishCmd() *cobra.Command {
	var (
		url, stream, prefix, tracePath string
		progress                       bool
		cfg                            = workload.Config{Workers: 128, Capacity: 8192, Duplicate: 1}
	)
	cmd := &cobra.Command{
		Use:   "publish --nats-url URL [--trace FILE]",
		Short: "Feed a NATS JetStream stream with the Mooncake workload's events",
		Long: `Publish generates the Mooncake workload (as kvidx bench does) and publishes each
request's events as one NDJSON message on subject <prefix>.<worker id> of
--nats-stream, creating the stream if needed, showing its progress on stderr
when it is a terminal (or with --progress). Router replicas started with
kvidx serve --nats-url consume it and answer identically.`,
		Example: `  kvidx publish --nats-url nats://127.0.0.1:4222
  kvidx serve --data-dir /tmp/a --listen 127.0.0.1:8585 --nats-url nats://127.0.0.1:4222 &
  kvidx serve --data-dir /tmp/b --listen 127.0.0.1:8586 --nats-url nats://127.0.0.1:4222 &`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				return fmt.Errorf("publish: --nats-url is required")
			}
			if err := jetstream.CheckURL(url); err != nil {
				return fmt.Errorf("publish: --nats-url: %w", err)
			}
			if err := jetstream.CheckStream(stream); err != nil {
				return fmt.Errorf("publish: --nats-stream: %w", err)
			}
			if err := jetstream.CheckSubjectPrefix(prefix); err != nil {
				return fmt.Errorf("publish: --subject-prefix: %w", err)
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			tr, err := loadTrace(tracePath)
			if err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			pr, pf := newRunProgress(cmd, "publish", progress)
			rep, err := jetstream.Publish(cmd.Context(), url, stream, prefix, tr, cfg, pf)
			pr.done()
			if err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "published %d messages (%d events, %d block ops) to %s, last sequence %d\n",
				rep.Messages, rep.Events, rep.BlockOps, stream, rep.LastSeq)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "nats-url", "", "NATS server URL")
	f.StringVar(&stream, "nats-stream", "KV_EVENTS", "JetStream stream (created with subjects <prefix>.> if missing)")
	f.StringVar(&prefix, "subject-prefix", "kv.events", "subject prefix; each message goes to <prefix>.<worker id>")
	f.StringVar(&tracePath, "trace", "", "Mooncake trace (.jsonl or .jsonl.gz); default: the embedded one")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "simulated workers")
	f.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "blocks each worker caches")
	f.IntVar(&cfg.Duplicate, "duplicate", cfg.Duplicate, "copies of each trace record")
	f.BoolVar(&progress, "progress", false, "print progress on stderr even when it is not a terminal")
	return cmd
}
