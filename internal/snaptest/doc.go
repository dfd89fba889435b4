// Package snaptest edits snapshot files for tests: it makes a sound
// snapshot look like one another kvidx build wrote (another format version,
// hash seed or sequence rule), which recovery and the CLI must tell apart
// from a damaged file.
package snaptest
