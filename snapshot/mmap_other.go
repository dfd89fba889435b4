//go:build !linux

package snapshot

const populate = 0
