package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kvidx/kvidx/snapshot"
)

// openPTY returns the master and slave ends of a new pseudo-terminal, or
// skips the test where there is none.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		m.Close()
		t.Skipf("TIOCGPTN: %v", e)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		t.Skipf("TIOCSPTLCK: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open slave: %v", err)
	}
	return m, s
}

// onTerminal runs kvidx args with stderr on a terminal and returns what the
// terminal received.
func onTerminal(t *testing.T, args ...string) string {
	t.Helper()
	m, s := openPTY(t)
	defer m.Close()
	got := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				got <- b.Bytes()
				return
			}
		}
	}()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(s)
	err := root.Execute()
	time.Sleep(50 * time.Millisecond)
	s.Close()
	out := string(<-got)
	if err != nil {
		t.Logf("kvidx %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// recover --dry-run verifies every candidate snapshot whole (on a 10M
// holder-block snapshot, seconds) and draws a progress bar while it does,
// as inspect summary DATA_DIR and inspect verify do. Found by review.
func TestRecoverDryRunShowsProgressOnTerminal(t *testing.T) {
	dir := t.TempDir()
	// A data directory whose snapshot has many chunks: progress is
	// reported chunk by chunk.
	st := openStore(t, dir)
	appendAll(t, st, genHistory(3, 200), 1)
	last, _ := st.Applied()
	f := st.Index().Freeze()
	if _, err := snapshot.Write(context.Background(), filepath.Join(dir, "snapshots"), f, snapshot.Meta{Index: last}, snapshot.WithChunkBytes(64)); err != nil {
		t.Fatal(err)
	}
	f.Release(st.Index())
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// The terminal works: inspect summary draws its bars on it.
	if out := onTerminal(t, "inspect", "summary", dir); !strings.Contains(out, "%") {
		t.Fatalf("control: inspect summary drew no progress bar on the terminal: %q", out)
	}
	if out := onTerminal(t, "recover", "--data-dir", dir, "--dry-run"); !strings.Contains(out, "%") {
		t.Fatalf("recover --dry-run verified the snapshots with no progress bar on the terminal (got %q)", out)
	}
}

// kvidx recover logs recovery's progress and report (at Info: "loading
// snapshot", "replaying WAL", "recovered"): with a logger at Warn, a 10M
// holder-block offline recovery was silent until it ended. Found by review.
func TestRecoverLogsRecoveryProgress(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, fixtureDir, dir)
	root := newRootCmd()
	var stderr bytes.Buffer
	root.SetArgs([]string{"recover", "--data-dir", dir})
	root.SetOut(io.Discard)
	root.SetErr(&stderr)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "replaying WAL") {
		t.Fatalf("kvidx recover logged no recovery progress; stderr: %q", stderr.String())
	}
}
