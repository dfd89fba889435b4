package loglimit

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		reason     string
		at         time.Duration // after t0
		ok         bool
		suppressed int
	}
	for _, tc := range []struct {
		name     string
		interval time.Duration
		steps    []step
	}{
		{"first of a reason passes, the next within the interval is held", time.Second, []step{
			{"a", 0, true, 0}, {"a", 100 * time.Millisecond, false, 0}, {"a", 999 * time.Millisecond, false, 0},
			{"a", time.Second, true, 2},
		}},
		{"reasons are limited apart", time.Second, []step{
			{"a", 0, true, 0}, {"a", 1, false, 0}, {"b", 2, true, 0}, {"b", 3, false, 0},
			{"a", time.Second, true, 1}, {"b", time.Second, false, 0}, {"b", time.Second + 2, true, 2},
		}},
		{"zero interval lets every line through", 0, []step{
			{"a", 0, true, 0}, {"a", 0, true, 0}, {"a", 1, true, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Limiter{Interval: tc.interval}
			for i, s := range tc.steps {
				ok, n := l.Allow(s.reason, t0.Add(s.at))
				if ok != s.ok || n != s.suppressed {
					t.Fatalf("step %d (%s at %v): Allow = %v, %d; want %v, %d", i, s.reason, s.at, ok, n, s.ok, s.suppressed)
				}
			}
		})
	}
}
