// Package natstest starts an embedded NATS JetStream server for tests, so
// that tests of JetStream sources and of the command that runs them need
// nothing installed.
package natstest
