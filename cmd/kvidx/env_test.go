package main

import (
	"errors"
	"maps"
	"path/filepath"
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
	if _, err := flagsFromEnv(fs); err != nil {
		t.Fatal(err)
	}
	if *dataDir != "/var/lib/kvidx" || *listen != "127.0.0.1:1" {
		t.Fatalf("data-dir %q, listen %q", *dataDir, *listen)
	}
	if want := []string{"tcp://h:5557=1,replay=tcp://h:5558", "tcp://h:6557=2"}; !slices.Equal(*zmq, want) {
		t.Fatalf("zmq %q, want %q", *zmq, want)
	}
}

// An error naming a flag set from the environment says so: the operator
// typed no --sync to look for (found by an audit). A longer flag that
// begins with the name (--sync-interval) is not the flag.
func TestEnvFlagsExplain(t *testing.T) {
	fromEnv := envFlags{"sync": "KVIDX_SYNC", "listen": "KVIDX_LISTEN"}
	for _, tc := range []struct{ err, want string }{
		{`serve: --sync: unknown sync policy "bad"`, `serve: --sync: unknown sync policy "bad" (set by the environment: KVIDX_SYNC)`},
		{`serve: --listen "bad": want HOST:PORT`, `serve: --listen "bad": want HOST:PORT (set by the environment: KVIDX_LISTEN)`},
		{`serve: --sync-interval 0s: want a positive duration`, `serve: --sync-interval 0s: want a positive duration`},
		{`serve: --sync-interval 0s, --sync x, --listen y`, `serve: --sync-interval 0s, --sync x, --listen y (set by the environment: KVIDX_LISTEN, KVIDX_SYNC)`},
		{`serve: --data-dir is empty`, `serve: --data-dir is empty`},
		{`ends with --sync`, `ends with --sync (set by the environment: KVIDX_SYNC)`},
	} {
		if got := fromEnv.explain(errors.New(tc.err)); got.Error() != tc.want {
			t.Errorf("explain(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if fromEnv.explain(nil) != nil {
		t.Error("explain(nil) is not nil")
	}
}

// serve takes its own flags from the environment, not the ones cobra adds
// to them when it runs (--help, the root's --cpuprofile): KVIDX_HELP=maybe
// refused to start the server, and KVIDX_CPUPROFILE, taken after the
// profile would have started, made none (found by review).
func TestServeFlagsFromEnvOwnFlagsOnly(t *testing.T) {
	root := newRootCmd()
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	serve.InitDefaultHelpFlag()
	if err := serve.ParseFlags(nil); err != nil { // merges the root's persistent flags, as a run does
		t.Fatal(err)
	}
	for _, name := range []string{"help", "cpuprofile", "sync"} {
		if serve.Flags().Lookup(name) == nil {
			t.Fatalf("serve's flags hold no --%s: the test does not set up what a run sees", name)
		}
	}
	t.Setenv("KVIDX_HELP", "maybe")
	t.Setenv("KVIDX_CPUPROFILE", filepath.Join(t.TempDir(), "cpu.prof"))
	t.Setenv("KVIDX_SYNC", "interval")
	set, err := serveFlagsFromEnv(serve)
	if err != nil {
		t.Fatalf("serveFlagsFromEnv: %v", err)
	}
	if want := (envFlags{"sync": "KVIDX_SYNC"}); !maps.Equal(set, want) {
		t.Fatalf("set from the environment: %v, want %v", set, want)
	}
	if got := serve.Flags().Lookup("sync").Value.String(); got != "interval" {
		t.Fatalf("--sync %q, want interval from KVIDX_SYNC", got)
	}
}
