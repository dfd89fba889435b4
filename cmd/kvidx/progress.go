package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// reporter writes replay's diagnostics to stderr and, when stderr is a
// terminal, a progress line redrawn at most once per second. Diagnostics
// erase the progress line first, so the two never share a line.
type reporter struct {
	w     io.Writer
	tty   bool
	shown bool // a progress line is on screen
	last  time.Time
}

func newReporter(w io.Writer) *reporter {
	return &reporter{w: w, tty: isTerminal(w), last: time.Now()}
}

// printf writes one diagnostic line.
func (r *reporter) printf(format string, args ...any) {
	r.endProgress()
	fmt.Fprintf(r.w, format+"\n", args...)
}

// progress shows how far the event file has been read, if a second has passed
// since the last update. Callers call it every so many lines, so that the
// clock is not read per event.
func (r *reporter) progress(line int, blocks uint64) {
	if !r.tty || time.Since(r.last) < time.Second {
		return
	}
	r.last = time.Now()
	fmt.Fprintf(r.w, "\r\x1b[Kkvidx replay: %d event lines read, %d blocks", line, blocks)
	r.shown = true
}

// endProgress erases the progress line, if one is shown.
func (r *reporter) endProgress() {
	if r.shown {
		fmt.Fprint(r.w, "\r\x1b[K")
		r.shown = false
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
