// Package rotest makes a path read-only for tests, as a read-only mount
// does, for the process running them: a read-only bind mount of the path
// on itself when the process is root (whom mode bits do not stop), else
// the write bits cleared from everything under it.
package rotest
