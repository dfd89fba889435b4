//go:build !linux

package engine

func adviseHugeRange(p, n uintptr) {}

func populateRange(p, n uintptr) {}
