// Package loglimit rate-limits log lines by reason: a flood of one kind of
// bad input logs one line per interval, with the count of those it held
// back, and never hides the first line of another kind.
package loglimit
