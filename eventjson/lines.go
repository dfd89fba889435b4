package eventjson

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// DefaultMaxLine is the longest line a [LineReader] accepts by default. A
// Stored event of tens of thousands of blocks is a few MiB; the limit only
// guards against reading a file that is not NDJSON into memory whole.
const DefaultMaxLine = 64 << 20

// LineReader splits an NDJSON stream into lines. It reads the stream once,
// front to back (pipes and stdin work), numbers lines from 1, skips lines
// holding only whitespace, drops the line terminator ("\n" or "\r\n") and
// returns a final line that lacks one.
//
//	lr := eventjson.NewLineReader(r)
//	for lr.Scan() {
//		err := dec.Decode(lr.Bytes(), &ev) // report as "line %d", lr.Line()
//	}
//	if err := lr.Err(); err != nil { ... }
type LineReader struct {
	sc      *bufio.Scanner
	line    int
	maxLine int
	err     error
}

// NewLineReader returns a LineReader over r accepting lines up to [DefaultMaxLine] bytes.
func NewLineReader(r io.Reader) *LineReader { return NewLineReaderSize(r, DefaultMaxLine) }

// NewLineReaderSize returns a LineReader over r accepting lines up to maxLine bytes
// (not counting the line terminator).
func NewLineReaderSize(r io.Reader, maxLine int) *LineReader {
	sc := bufio.NewScanner(r)
	// +2 for the "\r\n" that must fit in the buffer along with the longest line.
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine+2)), maxLine+2)
	return &LineReader{sc: sc, maxLine: maxLine}
}

// Scan advances to the next non-blank line, returning false at the end of the
// stream or on error (see [LineReader.Err]).
func (lr *LineReader) Scan() bool {
	for lr.sc.Scan() {
		lr.line++
		if len(lr.sc.Bytes()) > lr.maxLine {
			lr.err = &LineError{Line: lr.line, Err: fmt.Errorf("longer than %d bytes", lr.maxLine)}
			return false
		}
		if len(bytes.TrimLeft(lr.sc.Bytes(), " \t\r\n")) > 0 {
			return true
		}
	}
	if err := lr.sc.Err(); err != nil && lr.err == nil {
		if err == bufio.ErrTooLong {
			lr.err = &LineError{Line: lr.line + 1, Err: fmt.Errorf("longer than %d bytes: %w", lr.maxLine, err)}
		} else {
			lr.err = fmt.Errorf("after line %d: %w", lr.line, err)
		}
	}
	return false
}

// Bytes returns the current line without its terminator. It is valid until
// the next call to Scan.
func (lr *LineReader) Bytes() []byte { return lr.sc.Bytes() }

// Line returns the 1-based number of the current line, counting blank lines.
func (lr *LineReader) Line() int { return lr.line }

// Err returns the first read error, or nil at a clean end of stream. An
// over-long line is a [*LineError]; it ends the stream, since the rest of the
// line cannot be skipped without reading it.
func (lr *LineReader) Err() error { return lr.err }
