// Package logbuf is test support: a buffer that a logger writes to from
// several goroutines while a test reads what was logged.
package logbuf
