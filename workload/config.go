package workload

import (
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/kvidx/kvidx/engine"
)

// Config pins the simulated fleet and the trace duplication.
type Config struct {
	// Workers is W: the fleet is worker ids 0..W-1, DP rank 0. It is also the
	// length of the routing load window, in requests.
	Workers int
	// Capacity is C: how many blocks each worker's LRU cache holds.
	Capacity int
	// Duplicate is K: how many times each trace record is emitted, each copy
	// with its own block ids (see [CopyID]).
	Duplicate int
}

// MaxCapacity is the largest Config.Capacity: a simulated cache indexes its
// blocks with 32-bit integers.
const MaxCapacity = 1 << 30

// DefaultConfig returns the reference workload: W=128, C=8192, K=8.
func DefaultConfig() Config {
	return Config{Workers: 128, Capacity: 8192, Duplicate: 8}
}

// Validate reports a config that cannot run: every field must be at least 1.
func (c Config) Validate() error {
	var errs []error
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers must be >= 1, got %d", c.Workers))
	}
	if c.Workers > engine.MaxWorkerKeys {
		// Each worker is a worker key of the index, which holds at most
		// that many; the simulator also sizes per-worker state up front.
		errs = append(errs, fmt.Errorf("workers must be <= %d, got %d", engine.MaxWorkerKeys, c.Workers))
	}
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("capacity must be >= 1, got %d", c.Capacity))
	}
	if c.Capacity > MaxCapacity {
		errs = append(errs, fmt.Errorf("capacity must be <= %d, got %d", MaxCapacity, c.Capacity))
	}
	if c.Duplicate < 1 {
		errs = append(errs, fmt.Errorf("duplicate must be >= 1, got %d", c.Duplicate))
	}
	return errors.Join(errs...)
}

// validateFor validates c and checks that the trace's ids, duplicated, fit in
// 64 bits.
func (c Config) validateFor(tr *Trace) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("workload config: %w", err)
	}
	if tr == nil {
		return errors.New("workload: nil trace")
	}
	// Copy k's ids are id + k*(maxID+1): the largest, maxID +
	// (Duplicate-1)*(maxID+1), must fit (copy 0 is the trace as it is).
	maxID := tr.MaxID()
	if c.Duplicate == 1 {
		return nil
	}
	if maxID == math.MaxUint64 {
		return fmt.Errorf("workload: trace block id %d too large to duplicate", maxID)
	}
	hi, lo := bits.Mul64(maxID+1, uint64(c.Duplicate-1))
	if _, carry := bits.Add64(lo, maxID, 0); hi != 0 || carry != 0 {
		return fmt.Errorf("workload: trace block ids up to %d overflow 64 bits with duplicate %d", maxID, c.Duplicate)
	}
	return nil
}
