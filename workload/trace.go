package workload

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Record is one request of a Mooncake trace.
type Record struct {
	// Timestamp is the request's arrival time in milliseconds (informational).
	Timestamp int64
	// InputLength and OutputLength are the request's token counts (informational).
	InputLength  int
	OutputLength int
	// HashIDs names the request's 512-token blocks in order; equal leading ids
	// are a shared prefix.
	HashIDs []uint64
}

// Trace is a whole Mooncake trace, records in file order.
type Trace struct {
	Records []Record
}

// MaxID returns the largest block id of the trace (0 for a trace without blocks).
func (t *Trace) MaxID() uint64 {
	var m uint64
	for i := range t.Records {
		for _, id := range t.Records[i].HashIDs {
			m = max(m, id)
		}
	}
	return m
}

// TraceStats describes a trace's size.
type TraceStats struct {
	Records     int    // all records, with or without blocks
	Requests    int    // records with at least one block (the workload skips the others)
	BlockRefs   int    // sum of the records' block counts
	DistinctIDs int    // distinct block ids
	MaxBlocks   int    // most blocks in one record
	MaxID       uint64 // largest block id
}

// Stats counts the trace's records, block references and distinct ids.
func (t *Trace) Stats() TraceStats {
	s := TraceStats{Records: len(t.Records), MaxID: t.MaxID()}
	seen := make(map[uint64]struct{})
	for i := range t.Records {
		ids := t.Records[i].HashIDs
		if len(ids) == 0 {
			continue
		}
		s.Requests++
		s.BlockRefs += len(ids)
		s.MaxBlocks = max(s.MaxBlocks, len(ids))
		for _, id := range ids {
			seen[id] = struct{}{}
		}
	}
	s.DistinctIDs = len(seen)
	return s
}

// LineError is a trace line that could not be read; Line counts from 1.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the underlying error.
func (e *LineError) Unwrap() error { return e.Err }

// wireRecord is a trace line as JSON. Unknown keys are ignored.
type wireRecord struct {
	Timestamp    json.Number `json:"timestamp"`
	InputLength  int         `json:"input_length"`
	OutputLength int         `json:"output_length"`
	HashIDs      *[]uint64   `json:"hash_ids"`
}

// ReadTrace reads a Mooncake trace, plain JSON lines or gzipped (detected by
// its magic bytes). Blank lines are skipped. A malformed line fails the whole
// read with a [*LineError] naming it.
func ReadTrace(r io.Reader) (*Trace, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace: gzip: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	tr := &Trace{}
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			if len(b) == 0 {
				// The stream failed past the last whole line (a gzip
				// trailer's checksum, say): there is no line to name.
				return nil, fmt.Errorf("trace: after line %d: %w", line-1, err)
			}
			return nil, fmt.Errorf("trace: %w", &LineError{Line: line, Err: err})
		}
		if len(bytes.TrimSpace(b)) > 0 {
			rec, perr := parseRecord(b)
			if perr != nil {
				return nil, fmt.Errorf("trace: %w", &LineError{Line: line, Err: perr})
			}
			tr.Records = append(tr.Records, rec)
		}
		if err != nil { // io.EOF
			return tr, nil
		}
	}
}

func parseRecord(b []byte) (Record, error) {
	// A record is an object with hash_ids (empty for a request of no
	// block): null, {} or a bare value would otherwise read as an empty
	// record and be skipped without a word.
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
		return Record{}, errors.New("not a JSON object")
	}
	var w wireRecord
	if err := json.Unmarshal(b, &w); err != nil {
		return Record{}, err
	}
	if w.HashIDs == nil {
		return Record{}, errors.New(`no "hash_ids"`)
	}
	rec := Record{InputLength: w.InputLength, OutputLength: w.OutputLength, HashIDs: *w.HashIDs}
	if w.Timestamp != "" {
		ts, err := parseTimestamp(w.Timestamp)
		if err != nil {
			return Record{}, err
		}
		rec.Timestamp = ts
	}
	return rec, nil
}

// parseTimestamp accepts integer or fractional milliseconds.
func parseTimestamp(n json.Number) (int64, error) {
	if ts, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return ts, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsNaN(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, fmt.Errorf("bad timestamp %q", string(n))
	}
	return int64(f), nil
}
