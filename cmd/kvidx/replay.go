package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Stub: replaced by the real command.
func newReplayCmd() *cobra.Command {
	return &cobra.Command{Use: "replay", Short: "Apply events and answer queries (not implemented yet)",
		RunE: func(*cobra.Command, []string) error { return errors.New("not implemented") }}
}
