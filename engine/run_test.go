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

// TestVerifyFindsMisplacedReverseSlot moves a reverse-map slot to just
// before its home, where no search reaches it, and expects Verify to say so.
func TestVerifyFindsMisplacedReverseSlot(t *testing.T) {
	ix := New()
	w0 := WorkerKey{WorkerID: 1}
	ev := Event{Worker: w0, Kind: KindStored}
	for i := range 4 {
		ev.Blocks = append(ev.Blocks, Block{BlockHash: uint64(100 + i), TokensHash: uint64(200 + i)})
	}
	if err := ix.Apply(&ev); err != nil {
		t.Fatal(err)
	}
	if err := ix.Verify(); err != nil {
		t.Fatalf("before: %v", err)
	}
	_, w := ix.worker(w0)
	sl := w.rev.slots
	moved := false
	for i, s := range sl {
		h := slotHome(s.hi, len(sl))
		before := (h + len(sl) - 1) % len(sl)
		if s.ref == 0 || i != h || sl[before].ref != 0 {
			continue
		}
		sl[before], sl[i] = s, revSlot{}
		moved = true
		break
	}
	if !moved {
		t.Fatal("test setup: no reverse-map slot sits in its home with an empty slot before it")
	}
	if err := ix.Verify(); err == nil {
		t.Fatal("Verify passed an index with a reverse-map slot no search finds")
	}
}
