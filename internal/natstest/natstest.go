package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start starts an embedded JetStream server on loopback, storing in a
// temporary directory, for the test's duration, and returns its URL.
func Start(t testing.TB) string {
	t.Helper()
	url, _ := StartWith(t, t.TempDir(), 0)
	return url
}

// StartWith starts an embedded JetStream server on loopback storing in
// dir, with the given max payload (0: the server's default), and returns
// its URL and a function that shuts it down (also called when the test
// ends). A server started again on the same dir finds its streams there.
func StartWith(t testing.TB, dir string, maxPayload int32) (url string, shutdown func()) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, MaxPayload: maxPayload, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL(), ns.Shutdown
}
