// Package smallfile reads the small marker files of a data directory
// (FORMAT, the WAL's TAIL) with a bound: such a file grown large by damage
// or by mistake (a sparse file, a log copied over it) is refused, not read
// whole into memory.
package smallfile
