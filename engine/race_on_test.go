//go:build race

package engine

// raceEnabled: the race detector slows the engine about tenfold; long
// concurrent tests run fewer events under it.
const raceEnabled = true
