package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Stub: replaced by the real command.
func newBenchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Benchmark the engine on a trace (not implemented yet)",
		RunE: func(*cobra.Command, []string) error { return errors.New("not implemented") }}
}
