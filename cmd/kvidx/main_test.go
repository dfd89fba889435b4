package main

import (
	"os"
	"testing"

	"github.com/spf13/pflag"
)

// TestMain clears the KVIDX_<FLAG> variables of serve's flags: serve takes
// any flag not given from the environment, so one set where the tests run
// (an operator's shell with KVIDX_SYNC=interval, say) changed every serve
// the tests start, in process and in their child processes, and failed
// them. The tests that need such a variable set it themselves.
func TestMain(m *testing.M) {
	newServeCmd().Flags().VisitAll(func(fl *pflag.Flag) {
		os.Unsetenv(flagEnvName(fl.Name))
	})
	os.Exit(m.Run())
}
