package ingest

import (
	"strings"
	"testing"

	"github.com/kvidx/kvidx/recovery"
)

// The durable store is a source's Store.
var _ Store = (*recovery.Store)(nil)

func TestParseZMQSpec(t *testing.T) {
	good := map[string]ZMQSpec{
		"tcp://10.0.0.5:5557=7":                                 {Endpoint: "tcp://10.0.0.5:5557", WorkerID: 7},
		"tcp://h:5557=18446744073709551615,replay=tcp://h:5558": {Endpoint: "tcp://h:5557", WorkerID: 1<<64 - 1, Replay: "tcp://h:5558"},
		"tcp://[::1]:5557=1":                                    {Endpoint: "tcp://[::1]:5557", WorkerID: 1},
		"ipc:///run/vllm.sock=2":                                {Endpoint: "ipc:///run/vllm.sock", WorkerID: 2},
	}
	for in, want := range good {
		got, err := ParseZMQSpec(in)
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%q: String() = %q", in, got.String())
		}
	}
	for _, in := range []string{"", "tcp://h:1", "tcp://h:1=x", "tcp://h:1=-1", "h:1=7", "udp://h:1=7",
		"tcp://h:1=7,replay=", "tcp://h:1=7,foo=bar", "tcp://h:1=7,replay=h:2",
		// Addresses no dial can reach, refused at once rather than
		// retried for ever.
		"tcp://h=7", "tcp://h:x=7", "tcp://h:0=7", "tcp://h:65536=7", "tcp://h:1=7=8", "tcp://:1=7",
		"tcp://h:1=7,replay=tcp://h", "inproc://x=7"} {
		if _, err := ParseZMQSpec(in); err == nil {
			t.Errorf("%q: want an error", in)
		}
	}
}

// vLLM's KV-event config names its publisher's bind address, tcp://*:5557;
// copied into --zmq, zmq4 dialled it as 0.0.0.0 (whatever listens on
// kvidx's own host, or nothing, retried for ever), where libzmq refuses a
// connect to "*". It is refused at once, naming the cause.
func TestParseZMQSpecRefusesWildcardHost(t *testing.T) {
	for _, in := range []string{"tcp://*:5557=7", "tcp://10.0.0.5:5557=7,replay=tcp://*:5558"} {
		_, err := ParseZMQSpec(in)
		if err == nil || !strings.Contains(err.Error(), "bind address") {
			t.Errorf("%q: got %v, want an error saying * is a bind address", in, err)
		}
	}
}

// A second replay= option replaced the first without a word: which of the
// two endpoints the operator meant is unknown, so the value is refused.
func TestParseZMQSpecRefusesRepeatedReplay(t *testing.T) {
	in := "tcp://h:5557=7,replay=tcp://h:5558,replay=tcp://h:5559"
	if sp, err := ParseZMQSpec(in); err == nil || !strings.Contains(err.Error(), "replay") {
		t.Errorf("%q: got %+v, %v; want an error naming the repeated replay option", in, sp, err)
	}
}
