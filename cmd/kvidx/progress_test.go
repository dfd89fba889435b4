package main

import (
	"strings"
	"testing"
	"time"
)

// TestRunProgressLine checks what a run's progress writes on stderr, and
// that done leaves no progress line on a terminal whichever phase drew it
// last (loadgen's generation may report while its run never does: the
// report would then have followed on the generation's line).
func TestRunProgressLine(t *testing.T) {
	tests := []struct {
		name   string
		tty    bool
		phases []string // the phases reporting, in order, each once
		want   string
	}{
		{"terminal, one phase", true, []string{"bench"},
			"\r\x1b[Kbench: 1/4 requests (25%), 2s\r\x1b[K"},
		{"terminal, the first phase only", true, []string{"loadgen: generating the workload"},
			"\r\x1b[Kloadgen: generating the workload: 1/4 requests (25%), 2s\r\x1b[K"},
		{"terminal, both phases", true, []string{"loadgen: generating the workload", "loadgen"},
			"\r\x1b[Kloadgen: generating the workload: 1/4 requests (25%), 2s\r\x1b[Kloadgen: 1/4 requests (25%), 2s\r\x1b[K"},
		{"terminal, nothing reported", true, nil, ""},
		{"not a terminal", false, []string{"bench"}, "bench: 1/4 requests (25%), 2s\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			p := &runProgress{line: &statusLine{w: &out, tty: tt.tty}}
			for _, name := range tt.phases {
				p.named(name)(1, 4, 2*time.Second)
			}
			p.done()
			if got := out.String(); got != tt.want {
				t.Errorf("stderr %q, want %q", got, tt.want)
			}
		})
	}
	var nilProgress *runProgress
	nilProgress.done() // must not panic: newRunProgress returns nil when progress is off
}

// TestReporterErasesProgress checks that replay's diagnostics never share a
// line with its progress line.
func TestReporterErasesProgress(t *testing.T) {
	var out strings.Builder
	r := &reporter{line: &statusLine{w: &out, tty: true}}
	r.progress(10, 20)
	r.printf("kvidx replay: events line %d: %s", 11, "bad")
	r.endProgress()
	want := "\r\x1b[Kkvidx replay: 10 event lines read, 20 blocks\r\x1b[Kkvidx replay: events line 11: bad\n"
	if got := out.String(); got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}
