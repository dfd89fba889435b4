package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/kvidx/kvidx/workload"
)

// statusLine is the one progress line a command keeps on stderr. On a
// terminal each update redraws it in place, and clear erases it before
// anything else is written there, so that progress and other output never
// share a line; elsewhere each update is a line of its own.
type statusLine struct {
	w     io.Writer
	tty   bool
	shown bool // drawn on the terminal and not erased since
}

func newStatusLine(w io.Writer) *statusLine {
	return &statusLine{w: w, tty: isTerminal(w)}
}

// show draws line in place of the one shown (on a terminal) or writes it
// as a line of its own.
func (s *statusLine) show(line string) {
	if !s.tty {
		fmt.Fprintln(s.w, line)
		return
	}
	fmt.Fprintf(s.w, "\r\x1b[K%s", line)
	s.shown = true
}

// clear erases the line, if one is shown.
func (s *statusLine) clear() {
	if s.shown {
		fmt.Fprint(s.w, "\r\x1b[K")
		s.shown = false
	}
}

// reporter writes replay's diagnostics to stderr and, when stderr is a
// terminal, a progress line redrawn at most once per second. Diagnostics
// erase the progress line first, so the two never share a line.
type reporter struct {
	line *statusLine
	last time.Time
}

func newReporter(w io.Writer) *reporter {
	return &reporter{line: newStatusLine(w), last: time.Now()}
}

// printf writes one diagnostic line.
func (r *reporter) printf(format string, args ...any) {
	r.line.clear()
	fmt.Fprintf(r.line.w, format+"\n", args...)
}

// progress shows how far the event file has been read, if a second has passed
// since the last update. Callers call it every so many lines, so that the
// clock is not read per event.
func (r *reporter) progress(line int, blocks uint64) {
	if !r.line.tty || time.Since(r.last) < time.Second {
		return
	}
	r.last = time.Now()
	r.line.show(fmt.Sprintf("kvidx replay: %d event lines read, %d blocks", line, blocks))
}

// endProgress erases the progress line, if one is shown.
func (r *reporter) endProgress() { r.line.clear() }

// runProgress prints a run's progress (bench, loadgen, publish) on a
// statusLine: "NAME: done/total requests (pct%), elapsed".
type runProgress struct {
	line *statusLine
}

// newRunProgress returns the progress of a run named name on the command's
// stderr, and its print as a workload.ProgressFunc: on a terminal, or with
// --progress (want) when stderr is not one; else nil, nil (a nil
// *runProgress's done does nothing).
func newRunProgress(cmd *cobra.Command, name string, want bool) (*runProgress, workload.ProgressFunc) {
	line := newStatusLine(cmd.ErrOrStderr())
	if !line.tty && !want {
		return nil, nil
	}
	p := &runProgress{line: line}
	return p, p.named(name)
}

// named returns a workload.ProgressFunc that prints the progress of a phase
// named name on p's line: a run's phases (loadgen generates its workload,
// then runs it) share the line, and done erases whichever drew it last.
func (p *runProgress) named(name string) workload.ProgressFunc {
	return func(done, total int, elapsed time.Duration) {
		pct := 0.0
		if total > 0 {
			pct = float64(done) / float64(total) * 100
		}
		p.line.show(fmt.Sprintf("%s: %d/%d requests (%.0f%%), %s", name, done, total, pct, elapsed.Round(time.Second)))
	}
}

// done erases a terminal progress line. p may be nil.
func (p *runProgress) done() {
	if p != nil {
		p.line.clear()
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// bar is a progress bar on the command's stderr, shown only when stderr is
// a terminal; a nil *bar is a valid no-op.
type bar struct{ pb *progressbar.ProgressBar }

// newBar returns a progress bar of max steps (bytes when inBytes), or nil
// when w is not a terminal.
func newBar(w io.Writer, max int64, desc string, inBytes bool) *bar {
	if !isTerminal(w) || max <= 0 {
		return nil
	}
	return &bar{pb: progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(inBytes),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

// add advances the bar by n.
func (b *bar) add(n int64) {
	if b != nil {
		_ = b.pb.Add64(n)
	}
}

// done finishes and clears the bar.
func (b *bar) done() {
	if b != nil {
		_ = b.pb.Finish()
		_ = b.pb.Clear()
	}
}
