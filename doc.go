// Package kvidx holds what the whole module shares: the Mooncake trace that
// `kvidx bench` and the tests use by default.
package kvidx
