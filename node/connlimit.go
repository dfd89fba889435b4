package node

// fasthttpMaxConns is fasthttp's own default bound on the connections
// served at once.
const fasthttpMaxConns = 256 * 1024

// maxConnsFor is the default Config.MaxConns of a process allowed
// openFiles file descriptors (0: unknown): all but a reserve of an eighth
// of them, at least 256, for the WAL's segments and TAIL file, snapshots
// being written or read and the event sources' sockets, and at least half
// of them, and at most fasthttp's own default. Without a bound, a client
// that opened idle connections until the process had no descriptor left
// fenced the WAL ("open TAIL.tmp: too many open files") until a restart.
func maxConnsFor(openFiles uint64) int {
	if openFiles == 0 {
		return fasthttpMaxConns
	}
	reserve := max(openFiles/8, 256)
	conns := openFiles / 2
	if openFiles > reserve {
		conns = max(conns, openFiles-reserve)
	}
	// Capped after the reserve is taken (found by review: a limit just
	// past fasthttp's default was given all of it, leaving a reserve of
	// one descriptor at 256Ki+1).
	return int(min(max(conns, 1), fasthttpMaxConns))
}
