package main

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// Flags not given on the command line come from KVIDX_<FLAG>; a repeatable
// flag takes one value per space-separated field (KVIDX_ZMQ held only one
// endpoint: found by review).
func TestFlagsFromEnv(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	dataDir := fs.String("data-dir", "./kvidx-data", "")
	listen := fs.String("listen", "127.0.0.1:8585", "")
	zmq := fs.StringArray("zmq", nil, "")
	if err := fs.Parse([]string{"--listen", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVIDX_DATA_DIR", "/var/lib/kvidx")
	t.Setenv("KVIDX_LISTEN", "127.0.0.1:2") // the command line wins
	t.Setenv("KVIDX_ZMQ", "tcp://h:5557=1,replay=tcp://h:5558\n  tcp://h:6557=2 ")
	if err := flagsFromEnv(fs); err != nil {
		t.Fatal(err)
	}
	if *dataDir != "/var/lib/kvidx" || *listen != "127.0.0.1:1" {
		t.Fatalf("data-dir %q, listen %q", *dataDir, *listen)
	}
	if want := []string{"tcp://h:5557=1,replay=tcp://h:5558", "tcp://h:6557=2"}; !slices.Equal(*zmq, want) {
		t.Fatalf("zmq %q, want %q", *zmq, want)
	}
}
