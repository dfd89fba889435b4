package workload

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLRUOrder(t *testing.T) {
	tests := []struct {
		name    string
		touches []uint64
		evict   int
		want    []uint64 // oldest first, after evictions
		evicted []uint64
	}{
		{name: "insertion order", touches: []uint64{1, 2, 3}, want: []uint64{1, 2, 3}},
		{name: "touch refreshes", touches: []uint64{1, 2, 3, 1}, want: []uint64{2, 3, 1}},
		{name: "evict oldest", touches: []uint64{1, 2, 3, 1}, evict: 2, want: []uint64{1}, evicted: []uint64{2, 3}},
		{name: "reuse freed nodes", touches: []uint64{1, 2, 3}, evict: 3, want: nil, evicted: []uint64{1, 2, 3}},
		// A request touches its blocks last to first: the chain tail is evicted first.
		{name: "request tail first", touches: []uint64{30, 20, 10, 31, 21, 10}, evict: 3, want: []uint64{21, 10}, evicted: []uint64{30, 20, 31}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newLRU(2)
			for _, h := range tc.touches {
				c.touch(h)
			}
			var ev []uint64
			for range tc.evict {
				ev = append(ev, c.evictOldest())
			}
			if got := c.appendOldestFirst(nil); !slices.Equal(got, tc.want) {
				t.Errorf("order = %v, want %v", got, tc.want)
			}
			if !slices.Equal(ev, tc.evicted) {
				t.Errorf("evicted = %v, want %v", ev, tc.evicted)
			}
			if c.len() != len(tc.want) {
				t.Errorf("len = %d, want %d", c.len(), len(tc.want))
			}
			// Reinsert after eviction: freed nodes are reused, the list stays sound.
			for _, h := range []uint64{100, 101} {
				if c.touch(h) {
					t.Errorf("touch(%d) hit in a cache without it", h)
				}
			}
			if !c.touch(100) || !c.contains(101) {
				t.Error("reinserted blocks not cached")
			}
			if got := c.appendOldestFirst(nil); !slices.Equal(got[len(got)-2:], []uint64{101, 100}) {
				t.Errorf("after reinsert order = %v, want ... 101 100", got)
			}
		})
	}
}

// TestLRUModel checks the cache against a plain slice model under random
// touches and evictions, with few distinct hashes sharing probe runs.
func TestLRUModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, capacity := range []int{1, 3, 16, 100} {
		c := newLRU(capacity)
		var model []uint64 // oldest first
		for step := range 20000 {
			h := rng.Uint64N(uint64(3 * capacity))
			if step%7 == 0 {
				h <<= 58 // equal low bits: force collisions in the table
			}
			i := slices.Index(model, h)
			if hit := c.touch(h); hit != (i >= 0) {
				t.Fatalf("cap %d step %d: touch(%d) hit=%v, model %v", capacity, step, h, hit, i >= 0)
			}
			if i >= 0 {
				model = slices.Delete(model, i, i+1)
			}
			model = append(model, h)
			for len(model) > capacity {
				if got := c.evictOldest(); got != model[0] {
					t.Fatalf("cap %d step %d: evicted %d, want %d", capacity, step, got, model[0])
				}
				model = model[1:]
			}
			if c.len() != len(model) {
				t.Fatalf("cap %d step %d: len %d, want %d", capacity, step, c.len(), len(model))
			}
		}
		if got := c.appendOldestFirst(nil); !slices.Equal(got, model) {
			t.Fatalf("cap %d: order %v, want %v", capacity, got, model)
		}
		for _, h := range model {
			if !c.contains(h) {
				t.Fatalf("cap %d: %d missing", capacity, h)
			}
		}
	}
}
