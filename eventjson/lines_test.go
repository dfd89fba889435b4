package eventjson

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 5<<20) // beyond bufio's 64 KiB default
	tests := []struct {
		name, in string
		lines    []string
		nums     []int
	}{
		{"empty", "", nil, nil},
		{"one", "a\n", []string{"a"}, []int{1}},
		{"no final newline", "a\nb", []string{"a", "b"}, []int{1, 2}},
		{"blank lines", "\n a\n\n \t\r\nb\n\n", []string{" a", "b"}, []int{2, 5}},
		{"crlf", "a\r\nb\r\n", []string{"a", "b"}, []int{1, 2}},
		{"long", "a\n" + long + "\nb", []string{"a", long, "b"}, []int{1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// OneByteReader: the reader must not depend on reads returning whole lines.
			lr := NewLineReader(iotest.OneByteReader(strings.NewReader(tt.in)))
			if tt.name == "long" {
				lr = NewLineReader(strings.NewReader(tt.in))
			}
			var lines []string
			var nums []int
			for lr.Scan() {
				lines = append(lines, string(lr.Bytes()))
				nums = append(nums, lr.Line())
			}
			if err := lr.Err(); err != nil {
				t.Fatal(err)
			}
			if strings.Join(lines, "|") != strings.Join(tt.lines, "|") || len(nums) != len(tt.nums) {
				t.Fatalf("lines %.80q, want %.80q", lines, tt.lines)
			}
			for i := range nums {
				if nums[i] != tt.nums[i] {
					t.Fatalf("line numbers %v, want %v", nums, tt.nums)
				}
			}
		})
	}
}

func TestLineReaderTooLong(t *testing.T) {
	for _, in := range []string{"ok\n\n" + strings.Repeat("x", 11) + "\nok\n", "ok\n\n" + strings.Repeat("x", 100)} {
		lr := NewLineReaderSize(strings.NewReader(in), 10)
		n := 0
		for lr.Scan() {
			n++
		}
		var le *LineError
		if !errors.As(lr.Err(), &le) || le.Line != 3 || n != 1 {
			t.Errorf("%d lines, error %v; want 1 line, then a *LineError for line 3", n, lr.Err())
		}
	}
	lr := NewLineReaderSize(strings.NewReader(strings.Repeat("x", 10)), 10)
	if !lr.Scan() || lr.Scan() || lr.Err() != nil {
		t.Errorf("a line of exactly the limit: %v", lr.Err())
	}
}

func TestLineReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	lr := NewLineReader(io.MultiReader(strings.NewReader("a\n"), iotest.ErrReader(boom)))
	for lr.Scan() {
	}
	if !errors.Is(lr.Err(), boom) {
		t.Fatalf("Err() = %v, want it to wrap %v", lr.Err(), boom)
	}
}
