package loglimit

import (
	"sync"
	"time"
)

// Limiter lets one log line per reason through per Interval and counts the
// others. The zero value lets every line through; it is safe for concurrent
// use.
type Limiter struct {
	Interval time.Duration

	mu      sync.Mutex
	last    map[string]time.Time
	dropped map[string]int
}

// Allow tells whether a line of reason may be logged at now and, when it
// may, how many of that reason were held back since the last one logged.
func (r *Limiter) Allow(reason string, now time.Time) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last, r.dropped = map[string]time.Time{}, map[string]int{}
	}
	if t, seen := r.last[reason]; seen && now.Sub(t) < r.Interval {
		r.dropped[reason]++
		return false, 0
	}
	n := r.dropped[reason]
	r.last[reason], r.dropped[reason] = now, 0
	return true, n
}
