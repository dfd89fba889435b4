package workload

import (
	"bytes"
	"testing"

	"github.com/kvidx/kvidx"
)

// embeddedTrace reads the trace shipped with the module.
func embeddedTrace(tb testing.TB) *Trace {
	tb.Helper()
	tr, err := ReadTrace(bytes.NewReader(kvidx.MooncakeTraceGz))
	if err != nil {
		tb.Fatalf("read embedded trace: %v", err)
	}
	return tr
}
