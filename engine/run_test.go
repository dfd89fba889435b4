package engine

import (
	"slices"
	"testing"
)

// TestRunInsertDelete checks the two run moves against a slot-by-slot
// model, at every start and end of a run, wrapped around the table or not.
func TestRunInsertDelete(t *testing.T) {
	const size = 7
	fill := func() []int {
		tab := make([]int, size)
		for i := range tab {
			tab[i] = 10 + i
		}
		return tab
	}
	for i := range size {
		for n := range size { // run length moved: e = i+n (mod size)
			e := (i + n) % size

			got := fill()
			got[e] = 0
			want := slices.Clone(got)
			for k := n; k > 0; k-- { // want[i+k] = want[i+k-1]
				want[(i+k)%size] = want[(i+k-1)%size]
			}
			want[i] = 99
			runInsert(got, i, e, 99)
			if !slices.Equal(got, want) {
				t.Errorf("runInsert(i=%d, e=%d) = %v, want %v", i, e, got, want)
			}

			if n == 0 {
				continue
			}
			got = fill()
			want = slices.Clone(got)
			for k := 0; k < n-1; k++ { // want[i+k] = want[i+k+1]
				want[(i+k)%size] = want[(i+k+1)%size]
			}
			want[(i+n-1)%size] = 0
			runDelete(got, i, e)
			if !slices.Equal(got, want) {
				t.Errorf("runDelete(i=%d, e=%d) = %v, want %v", i, e, got, want)
			}
		}
	}
}
