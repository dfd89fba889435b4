package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/kvidx/kvidx/engine"
)

// checkReservation refuses a reservation of holderBlocks (what flags names)
// that needs more memory than the machine has available: the index maps
// all of it in at start, and such a reservation died in the runtime, out of
// memory, with a stack trace (or by the kernel's OOM killer). Where the
// available memory cannot be read, nothing is checked.
func checkReservation(flags string, holderBlocks int) error {
	avail := memAvailable()
	need := int64(holderBlocks) * engine.ReservedBytesPerHolderBlock
	if avail > 0 && need > avail {
		return fmt.Errorf("%s: reserving %d holder-blocks maps in about %d MiB, and %d MiB of memory are available: reserve less", flags, holderBlocks, need>>20, avail>>20)
	}
	return nil
}

// memAvailable returns MemAvailable of /proc/meminfo in bytes, or 0 when it
// cannot be read (not Linux).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
