package node

import (
	"context"
	"net"
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
	cfg := DefaultConfig()
	cfg.Logger = quietLogger()
	srv := New(cfg)
	srv.SetStore(newFakeStore())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	rep, err := LoadGen(context.Background(), "http://"+ln.Addr().String(), embeddedTrace(t), workload.DefaultConfig(), LoadOptions{Duration: 10 * time.Second})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
