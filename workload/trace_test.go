package workload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"slices"
	"strings"
	"testing"
)

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestReadTrace(t *testing.T) {
	const good = `{"timestamp": 0, "input_length": 1024, "output_length": 6, "hash_ids": [0, 1]}
{"timestamp": 40, "input_length": 600, "output_length": 3, "hash_ids": [0, 2, 3], "extra": "ignored"}

{"timestamp": 41.5, "input_length": 10, "output_length": 1, "hash_ids": []}
`
	want := []Record{
		{Timestamp: 0, InputLength: 1024, OutputLength: 6, HashIDs: []uint64{0, 1}},
		{Timestamp: 40, InputLength: 600, OutputLength: 3, HashIDs: []uint64{0, 2, 3}},
		{Timestamp: 41, InputLength: 10, OutputLength: 1, HashIDs: []uint64{}},
	}
	tests := []struct {
		name     string
		in       []byte
		want     []Record
		errLine  int    // 0: no error expected
		errMatch string // substring of the error
	}{
		{name: "plain", in: []byte(good), want: want},
		{name: "gzip", in: gz(t, good), want: want},
		{name: "no final newline", in: []byte(strings.TrimSuffix(good, "\n")), want: want},
		{name: "empty", in: nil, want: nil},
		{name: "bad json", in: []byte("{\"hash_ids\": [1]}\n\n{\"hash_ids\": [1,\n"), errLine: 3, errMatch: "line 3"},
		{name: "negative id", in: []byte("{\"hash_ids\": [1]}\n{\"hash_ids\": [-1]}\n"), errLine: 2, errMatch: "line 2"},
		{name: "bad timestamp", in: []byte("{\"timestamp\": \"x\", \"hash_ids\": [1]}\n"), errLine: 1, errMatch: "line 1"},
		{name: "gzip bad line", in: gz(t, "{\"hash_ids\": [1]}\nnot json\n"), errLine: 2, errMatch: "line 2"},
		{name: "truncated gzip", in: gz(t, good)[:40], errMatch: "trace"},
		// Found by review: these read as records of no block, skipped silently.
		{name: "null line", in: []byte("{\"hash_ids\": [1]}\nnull\n"), errLine: 2, errMatch: "line 2: not a JSON object"},
		{name: "no hash_ids", in: []byte("{}\n"), errLine: 1, errMatch: `line 1: no "hash_ids"`},
		{name: "hash_ids null", in: []byte("{\"hash_ids\": null}\n"), errLine: 1, errMatch: `no "hash_ids"`},
		{name: "array line", in: []byte("[1, 2]\n"), errLine: 1, errMatch: "not a JSON object"},
		// A damaged gzip trailer is past the last line: no line to name.
		{name: "gzip bad checksum", in: badChecksum(gz(t, good)), errMatch: "after line 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(bytes.NewReader(tc.in))
			if tc.errMatch != "" {
				if err == nil {
					t.Fatalf("ReadTrace = %d records, want error", len(tr.Records))
				}
				if !strings.Contains(err.Error(), tc.errMatch) {
					t.Errorf("error %q does not contain %q", err, tc.errMatch)
				}
				if tc.errLine != 0 {
					var le *LineError
					if !errors.As(err, &le) || le.Line != tc.errLine {
						t.Errorf("error %v: want *LineError at line %d", err, tc.errLine)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadTrace: %v", err)
			}
			if !slices.EqualFunc(tr.Records, tc.want, func(a, b Record) bool {
				return a.Timestamp == b.Timestamp && a.InputLength == b.InputLength &&
					a.OutputLength == b.OutputLength && slices.Equal(a.HashIDs, b.HashIDs)
			}) {
				t.Errorf("records = %+v, want %+v", tr.Records, tc.want)
			}
		})
	}
}

func TestEmbeddedTraceStats(t *testing.T) {
	got := embeddedTrace(t).Stats()
	want := TraceStats{Records: 3993, Requests: 3993, BlockRefs: 121877, DistinctIDs: 43924, MaxBlocks: 374, MaxID: 43923}
	if got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

// badChecksum flips a bit of a gzip stream's CRC-32 trailer.
func badChecksum(b []byte) []byte {
	b = bytes.Clone(b)
	b[len(b)-8] ^= 1
	return b
}
