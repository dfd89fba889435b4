package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// newRootCmd returns the kvidx command tree.
func newRootCmd() *cobra.Command {
	root, _ := newRootCmdWithFinish()
	return root
}

// newRootCmdWithFinish returns the command tree and what to call once it
// has run, whatever the outcome (it ends a --cpuprofile).
func newRootCmdWithFinish() (*cobra.Command, func()) {
	root := &cobra.Command{
		Use:   "kvidx",
		Short: "KV-cache prefix index for LLM routers",
		Long: `kvidx tells an LLM router which inference worker already holds the longest
cached prefix of a request. It turns workers' KV-cache events (blocks stored,
removed, cleared; workers gone) into an index that scores prefixes exactly.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --cpuprofile FILE profiles any command's whole run (for performance
	// work; hidden from --help).
	var cpuProfile string
	var stopProfile func()
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	_ = root.PersistentFlags().MarkHidden("cpuprofile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuProfile == "" {
			return nil
		}
		pf, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); pf.Close() }
		return nil
	}
	root.AddCommand(newVersionCmd(), newReplayCmd(), newBenchCmd(), newWALCmd(), newLoadgenCmd(), newServeCmd(), newInspectCmd(), newRecoverCmd(), newPublishCmd())
	// cobra adds its completion command when the tree runs; added now, it
	// refuses an unknown shell ("kvidx completion bsh") like the other groups.
	// Its scripts go to the output cobra finds when it is made: one that
	// follows the tree's, so that a SetOut made later applies to them too.
	root.SetOut(treeOutput{root})
	root.InitDefaultCompletionCmd()
	root.SetOut(nil)
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			commandGroup(c)
		}
	}
	// Not a post-run hook: cobra skips those after an error.
	finish := func() {
		if stopProfile != nil {
			stopProfile()
			stopProfile = nil
		}
	}
	return root, finish
}

// treeOutput writes to the command tree's output as it is when written to
// (SetOut's writer, or stdout).
type treeOutput struct{ root *cobra.Command }

func (o treeOutput) Write(p []byte) (int, error) { return o.root.OutOrStdout().Write(p) }

// commandGroup makes cmd, a command that only holds subcommands, refuse an
// unknown one ("kvidx inspect summ") with an error and a non-zero exit:
// without a Run, cobra prints the help and exits 0, which a script takes
// for success. Bare, it prints its help.
func commandGroup(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}
