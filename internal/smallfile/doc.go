// Package smallfile reads and writes the small marker files of a data
// directory (FORMAT, the WAL's TAIL). A read is bounded: such a file grown
// large by damage or by mistake (a sparse file, a log copied over it) is
// refused, not read whole into memory. A write goes through a temporary
// file, and a named pipe left at its name (which would block the open for
// good) is removed first.
package smallfile
