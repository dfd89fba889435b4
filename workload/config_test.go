package workload

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

func TestCopyID(t *testing.T) {
	tests := []struct {
		id, maxID uint64
		k         int
		want      uint64
	}{
		{id: 0, maxID: 43923, k: 0, want: 0},
		{id: 7, maxID: 43923, k: 0, want: 7},
		{id: 0, maxID: 43923, k: 1, want: 43924},
		{id: 43923, maxID: 43923, k: 1, want: 87847},
		{id: 5, maxID: 9, k: 3, want: 35},
		{id: 0, maxID: 0, k: 4, want: 4},
	}
	for _, tc := range tests {
		if got := CopyID(tc.id, tc.maxID, tc.k); got != tc.want {
			t.Errorf("CopyID(%d, %d, %d) = %d, want %d", tc.id, tc.maxID, tc.k, got, tc.want)
		}
	}
}

func TestRequestsDuplicate(t *testing.T) {
	tr := &Trace{Records: []Record{
		{HashIDs: []uint64{0, 1}},
		{HashIDs: nil}, // skipped
		{HashIDs: []uint64{2}},
	}}
	type got struct {
		seq, record, copy int
		ids               []uint64 // recovered from the tokens hashes
	}
	want := []got{
		{0, 0, 0, []uint64{0, 1}},
		{1, 0, 1, []uint64{3, 4}},
		{2, 0, 2, []uint64{6, 7}},
		{3, 2, 0, []uint64{2}},
		{4, 2, 1, []uint64{5}},
		{5, 2, 2, []uint64{8}},
	}
	byHash := map[uint64]uint64{}
	for id := range uint64(9) {
		byHash[TokensHash(id)] = id
	}
	var res []got
	for req := range Requests(tr, 3) {
		g := got{seq: req.Seq, record: req.Record, copy: req.Copy}
		for _, h := range req.TokensHashes {
			g.ids = append(g.ids, byHash[h])
		}
		if !slices.Equal(req.BlockHashes, engine.SeqHashes(nil, req.TokensHashes)) {
			t.Errorf("request %d: block hashes are not the router sequence hashes", req.Seq)
		}
		res = append(res, g)
	}
	if !slices.EqualFunc(res, want, func(a, b got) bool {
		return a.seq == b.seq && a.record == b.record && a.copy == b.copy && slices.Equal(a.ids, b.ids)
	}) {
		t.Errorf("requests = %v, want %v", res, want)
	}
	if n := NumRequests(tr, 3); n != len(want) {
		t.Errorf("NumRequests = %d, want %d", n, len(want))
	}
}

func TestTokensHash(t *testing.T) {
	// xxh3-64 of the id's 8 little-endian bytes, seed 1337: pinned so that
	// figures compare across tools.
	tests := []struct{ id, want uint64 }{
		{0, 0x60a885a6b03b1f0a},
		{1, 0x5b55b25f8677019b},
		{43924, 0xfa8d3f93a4b4df02},
	}
	for _, tc := range tests {
		if got := TokensHash(tc.id); got != tc.want {
			t.Errorf("TokensHash(%d) = %#x, want %#x", tc.id, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string // "" = valid
	}{
		{DefaultConfig(), ""},
		{Config{Workers: 1, Capacity: 1, Duplicate: 1}, ""},
		{Config{Workers: 0, Capacity: 1, Duplicate: 1}, "workers must be >= 1"},
		{Config{Workers: 1, Capacity: 0, Duplicate: 1}, "capacity must be >= 1"},
		{Config{Workers: 1, Capacity: 1, Duplicate: -2}, "duplicate must be >= 1"},
		{Config{Workers: 1, Capacity: MaxCapacity + 1, Duplicate: 1}, "capacity must be <="},
		{Config{Workers: math.MaxInt32, Capacity: 1, Duplicate: 1}, "workers must be <="},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	huge := &Trace{Records: []Record{{HashIDs: []uint64{math.MaxUint64 / 2}}}}
	if err := (Config{Workers: 1, Capacity: 1, Duplicate: 3}).validateFor(huge); err == nil {
		t.Error("validateFor: duplicated ids overflow, want error")
	}
	if err := (Config{Workers: 1, Capacity: 1, Duplicate: 1}).validateFor(huge); err != nil {
		t.Errorf("validateFor: %v", err)
	}
	// The largest duplicated id is maxID + (K-1)*(maxID+1): exactly 2^64-1
	// fits (both were refused: an off-by-one found by review).
	for _, tc := range []struct {
		maxID uint64
		k     int
		ok    bool
	}{
		{math.MaxUint64, 1, true},
		{math.MaxUint64, 2, false},
		{math.MaxInt64, 2, true},
		{math.MaxInt64 + 1, 2, false},
		{math.MaxUint64/3 - 1, 3, true}, // 3*maxID + 2 = 2^64 - 2
		{math.MaxUint64 / 3, 3, false},
	} {
		tr := &Trace{Records: []Record{{HashIDs: []uint64{tc.maxID}}}}
		if err := (Config{Workers: 1, Capacity: 1, Duplicate: tc.k}).validateFor(tr); (err == nil) != tc.ok {
			t.Errorf("max id %d, duplicate %d: %v, want ok %v", tc.maxID, tc.k, err, tc.ok)
		}
	}
}

// Request and block counts saturate instead of wrapping: a --duplicate of
// 2^62 made them negative, which panicked kvidx bench (a negative slice
// capacity) and let kvidx loadgen past its request limit. Found by review.
func TestCountsSaturate(t *testing.T) {
	tr := &Trace{Records: []Record{{HashIDs: []uint64{0, 1}}, {HashIDs: []uint64{1}}, {}}}
	if n := NumRequests(tr, 3); n != 6 {
		t.Fatalf("NumRequests: %d, want 6", n)
	}
	if n := NumBlocks(tr, 3); n != 9 {
		t.Fatalf("NumBlocks: %d, want 9", n)
	}
	for _, k := range []int{1 << 62, math.MaxInt} {
		if n := NumRequests(tr, k); n != math.MaxInt {
			t.Errorf("NumRequests(duplicate %d) = %d, want math.MaxInt", k, n)
		}
		if n := NumBlocks(tr, k); n != math.MaxInt {
			t.Errorf("NumBlocks(duplicate %d) = %d, want math.MaxInt", k, n)
		}
	}
	if n := NumRequests(tr, 0); n != 0 {
		t.Errorf("NumRequests(duplicate 0) = %d", n)
	}
}
