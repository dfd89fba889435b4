package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvidx/kvidx/engine"
)

// FuzzReplay: `kvidx replay` fed arbitrary event and query files never
// panics, leaves an index whose invariants hold, and answers every query
// line with one result line. Seeds: testdata/replay.
func FuzzReplay(f *testing.F) {
	queries, err := os.ReadFile(filepath.Join("..", "..", "testdata", "replay", "queries.ndjson"))
	if err != nil {
		f.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "replay", "*.ndjson"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, queries)
	}
	f.Fuzz(func(t *testing.T, events, queries []byte) {
		ix := engine.New()
		rep := newReporter(io.Discard)
		if _, _, err := applyEvents(ix, bytes.NewReader(events), rep); err != nil {
			return // a line too long
		}
		if err := ix.Verify(); err != nil {
			t.Fatalf("index after replay: %v", err)
		}
		var out bytes.Buffer
		if _, err := answerQueries(ix, bytes.NewReader(queries), &out, rep); err != nil {
			return
		}
		lines := 0
		for l := range bytes.SplitSeq(queries, []byte{'\n'}) {
			if len(bytes.TrimLeft(l, " \t\r")) > 0 {
				lines++
			}
		}
		if got := bytes.Count(out.Bytes(), []byte{'\n'}); got != lines {
			t.Fatalf("%d query lines answered with %d result lines", lines, got)
		}
	})
}
