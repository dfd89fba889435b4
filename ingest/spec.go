package ingest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ZMQSpec is one --zmq flag value: a vLLM publisher endpoint, the worker id
// its events belong to, and its optional replay endpoint.
type ZMQSpec struct {
	Endpoint string // e.g. tcp://10.0.0.5:5557
	WorkerID uint64
	Replay   string // e.g. tcp://10.0.0.5:5558; empty: no replay
}

// ParseZMQSpec parses "ENDPOINT=WORKER_ID[,replay=REPLAY_ENDPOINT]", e.g.
// "tcp://10.0.0.5:5557=7,replay=tcp://10.0.0.5:5558".
func ParseZMQSpec(s string) (ZMQSpec, error) {
	var sp ZMQSpec
	main, opts, _ := strings.Cut(s, ",")
	i := strings.LastIndexByte(main, '=')
	if i < 0 {
		return sp, fmt.Errorf("zmq source %q: want ENDPOINT=WORKER_ID[,replay=ENDPOINT]", s)
	}
	sp.Endpoint = main[:i]
	if err := checkEndpoint(sp.Endpoint); err != nil {
		return sp, fmt.Errorf("zmq source %q: %w", s, err)
	}
	id, err := strconv.ParseUint(main[i+1:], 10, 64)
	if err != nil {
		return sp, fmt.Errorf("zmq source %q: worker id %q: want an unsigned integer", s, main[i+1:])
	}
	sp.WorkerID = id
	for opts != "" {
		var opt string
		opt, opts, _ = strings.Cut(opts, ",")
		k, val, ok := strings.Cut(opt, "=")
		switch {
		case ok && k == "replay":
			if sp.Replay != "" {
				// The last one used to win without a word: which one
				// the operator meant is unknown.
				return sp, fmt.Errorf("zmq source %q: replay given twice (%s and %s)", s, sp.Replay, val)
			}
			if err := checkEndpoint(val); err != nil {
				return sp, fmt.Errorf("zmq source %q: replay: %w", s, err)
			}
			sp.Replay = val
		default:
			return sp, fmt.Errorf("zmq source %q: unknown option %q (want replay=ENDPOINT)", s, opt)
		}
	}
	return sp, nil
}

func checkEndpoint(ep string) error {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok || addr == "" {
		return fmt.Errorf("endpoint %q: want tcp://HOST:PORT", ep)
	}
	switch scheme {
	case "tcp":
		// Checked here, not at the first dial: an address that can never
		// be dialled would otherwise be retried for ever.
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return fmt.Errorf("endpoint %q: want tcp://HOST:PORT", ep)
		}
		if host == "*" {
			// vLLM's config names its bind address, tcp://*:5557: zmq4
			// dials "*" as 0.0.0.0, this host, where libzmq refuses it.
			return fmt.Errorf("endpoint %q: * is a bind address (the engine's side); want the engine's host, e.g. tcp://10.0.0.5:%s", ep, port)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("endpoint %q: port %q: want a number from 1 to 65535", ep, port)
		}
	case "ipc":
	case "inproc":
		// An inproc endpoint lives inside one process: no engine can
		// publish on it to kvidx.
		return fmt.Errorf("endpoint %q: inproc endpoints exist only inside one process; want tcp://HOST:PORT or ipc://PATH", ep)
	default:
		return fmt.Errorf("endpoint %q: unsupported transport %q (want tcp://HOST:PORT or ipc://PATH)", ep, scheme)
	}
	return nil
}

// String formats the spec as ParseZMQSpec reads it.
func (sp ZMQSpec) String() string {
	s := sp.Endpoint + "=" + strconv.FormatUint(sp.WorkerID, 10)
	if sp.Replay != "" {
		s += ",replay=" + sp.Replay
	}
	return s
}
