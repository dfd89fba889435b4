package eventjson

import (
	"fmt"
	"strconv"
)

// LineError is an error in one line of an NDJSON stream or body.
type LineError struct {
	Line int // 1-based
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// ElementError is an error in one element of a JSON array of events.
type ElementError struct {
	Index int // 0-based
	Err   error
}

func (e *ElementError) Error() string { return fmt.Sprintf("element %d: %v", e.Index, e.Err) }
func (e *ElementError) Unwrap() error { return e.Err }

// fieldError locates an error inside a value by its JSON path, e.g.
// "event.data.stored.blocks[3].block_hash", so that a producer can tell which
// of thousands of numbers on a line is wrong.
type fieldError struct {
	path string
	err  error
}

func (e *fieldError) Error() string { return e.path + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// inField prefixes err's path with name. It builds the path only on failure,
// so the decoding fast path never formats anything.
func inField(name string, err error) error {
	if err == nil {
		return nil
	}
	if fe, ok := err.(*fieldError); ok {
		if fe.path != "" && fe.path[0] == '[' {
			fe.path = name + fe.path
		} else {
			fe.path = name + "." + fe.path
		}
		return fe
	}
	return &fieldError{path: name, err: err}
}

// inElement prefixes err's path with an array index.
func inElement(i int, err error) error {
	return inField(fmt.Sprintf("[%d]", i), err)
}

// keyName renders an unknown key for a path: as is when it looks like an
// identifier, quoted otherwise (empty, spaces, brackets, megabytes).
func keyName(key []byte) string {
	if len(key) == 0 || len(key) > 64 {
		return strconv.Quote(clip(key))
	}
	for _, c := range key {
		if !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return strconv.Quote(string(key))
		}
	}
	return string(key)
}
