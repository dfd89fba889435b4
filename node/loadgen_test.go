package node

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kvidx/kvidx/workload"
)

// TestLoadGenFigures drives a Run server (fake store) with the reference
// workload: KVIDX_LOADGEN=1 go test -run LoadGenFigures -v ./node/
func TestLoadGenFigures(t *testing.T) {
	if os.Getenv("KVIDX_LOADGEN") == "" {
		t.Skip("set KVIDX_LOADGEN=1 to measure")
	}
	srv, _ := newServerOnFake(DefaultConfig())
	url, stop := startRun(t, srv)
	rep, err := LoadGen(context.Background(), url, embeddedTrace(t), workload.DefaultConfig(), LoadOptions{Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
