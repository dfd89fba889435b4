package main

import (
	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "kvidx",
		Short: "KV-cache prefix index for LLM routers",
		Long: `kvidx tells an LLM router which inference worker already holds the longest
cached prefix of a request. It turns workers' KV-cache events (blocks stored,
removed, cleared; workers gone) into an index that scores prefixes exactly.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newReplayCmd(), newBenchCmd(), newWALCmd(), newLoadgenCmd(), newServeCmd(), newInspectCmd(), newRecoverCmd(), newPublishCmd())
	return root
}
