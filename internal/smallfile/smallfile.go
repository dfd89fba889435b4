package smallfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is returned, wrapped, for a file longer than the bound.
var ErrTooLarge = errors.New("file too large")

// Read returns the contents of the file at path, or an error wrapping
// ErrTooLarge when it holds more than max bytes. It reads at most max+1
// bytes whatever the file's size.
func Read(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", path, max, ErrTooLarge)
	}
	return b, nil
}
