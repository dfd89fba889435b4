package ingest

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzVLLMDecode: no payload panics the decoder, and a decoded batch's
// events are well formed. Seeds: the golden files plus
// testdata/fuzz/FuzzVLLMDecode.
func FuzzVLLMDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "vllm", "*.msgpack"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var d VLLMDecoder
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := d.Decode(p, 9)
		if err != nil {
			return
		}
		for _, ev := range b.Events {
			if ev.Worker.WorkerID != 9 || ev.Worker.DPRank != b.DPRank || ev.Kind == 0 {
				t.Fatalf("bad event %+v", ev)
			}
		}
	})
}
