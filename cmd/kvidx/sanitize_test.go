package main

import "testing"

// sanitize replaces the data directory's path as a whole, never inside a
// word or a longer path (a directory named "wal" or "x" garbled the repair
// command the report prints). Found by review.
func TestSanitize(t *testing.T) {
	tests := []struct{ msg, dir, want string }{
		{"data dir /d/x: no FORMAT", "/d/x", "data dir DATA_DIR: no FORMAT"},
		{"wal /d/x/wal: segment /d/x/wal/0001 offset 3", "/d/x", "wal DATA_DIR/wal: segment DATA_DIR/wal/0001 offset 3"},
		{"kvidx wal repair wal --truncate-before 32 --yes", "wal", "kvidx wal repair DATA_DIR --truncate-before 32 --yes"},
		{"wal wal/wal: entry 32 at WAL index 31; kvidx wal repair wal --truncate-after 31 --yes", "wal",
			"wal DATA_DIR/wal: entry 32 at WAL index 31; kvidx wal repair DATA_DIR --truncate-after 31 --yes"},
		{"at WAL index 31: kvidx wal repair x --yes (in x)", "x", "at WAL index 31: kvidx wal repair DATA_DIR --yes (in DATA_DIR)"},
		{"/other/x/wal is not x/wal", "x", "/other/x/wal is not DATA_DIR/wal"},
		{"snapshot x.bolt", "x", "snapshot x.bolt"},
		{"nothing here", "", "nothing here"},
	}
	for _, tt := range tests {
		if got := sanitize(tt.msg, tt.dir); got != tt.want {
			t.Errorf("sanitize(%q, %q) = %q, want %q", tt.msg, tt.dir, got, tt.want)
		}
	}
}
