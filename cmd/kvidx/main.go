// Command kvidx is the KV-cache prefix index for LLM routers: replay event logs,
// benchmark the engine, and (later) serve and inspect an index.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kvidx:", err)
		os.Exit(1)
	}
}
