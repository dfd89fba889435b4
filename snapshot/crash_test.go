package snapshot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
)

const (
	crashEnv      = "KVIDX_SNAPSHOT_CRASH_DIR"
	crashPerIndex = 400 // events applied per snapshot index
)

// crashEvents is the deterministic event stream of the crash helper: the
// snapshot of index n holds the state after crashEvents()[:n*crashPerIndex].
func crashEvents() []engine.Event {
	return randEvents(rand.New(rand.NewPCG(11, 11)), 200*crashPerIndex)
}

// TestMain runs the crash helper when re-executed as the child of
// TestCrashDuringWrite: it writes snapshots in a loop until killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashHelper(dir)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func crashHelper(dir string) {
	evs := crashEvents()
	// A big base index so that writes take a while.
	base := bigIndex(rand.New(rand.NewPCG(12, 12)), 300, 60)
	f0 := base.Freeze()
	ix := engine.New()
	for n := uint64(1); n*crashPerIndex <= uint64(len(evs)); n++ {
		apply(ix, evs[(n-1)*crashPerIndex:n*crashPerIndex])
		// Pad the write with the big index first, under an index that is
		// never the newest, then the real one.
		if _, err := Write(context.Background(), dir, f0, Meta{Index: 0}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := Write(context.Background(), dir, ix.Freeze(), Meta{Index: n}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := Prune(dir, 3, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(n)
	}
}

func TestCrashDuringWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	evs := crashEvents()
	qs := queries(rand.New(rand.NewPCG(1, 1)))
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	deadline := time.Now().Add(8 * time.Second)
	sawTemp := 0
	for round := 0; round < 6 && (round == 0 || time.Now().Before(deadline)); round++ {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the first snapshots, then kill at a random moment. The
		// helper builds its base index first: about 5 s under -race, and
		// more than twice that while CI tests other packages beside it.
		for waitUntil := time.Now().Add(2 * time.Minute); ; {
			if files, _ := List(dir); len(files) > 1 {
				break
			}
			if time.Now().After(waitUntil) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the helper wrote no snapshot in 2 minutes: %s", stderr.String())
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("helper ended before the kill: %v: %s", err, stderr.String())
		}
		temps, _ := filepath.Glob(filepath.Join(dir, ".snapshot-*"))
		sawTemp += len(temps)
		removed, err := CleanTemp(dir)
		if err != nil || len(removed) != len(temps) {
			t.Fatalf("clean temp: removed %v, %v; temps were %v", removed, err, temps)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".snapshot-*")); len(left) != 0 {
			t.Fatalf("temp files left: %v", left)
		}
		files, err := List(dir)
		if err != nil || len(files) < 2 {
			t.Fatalf("after the kill: %v, %v", files, err)
		}
		for _, f := range files {
			got, m, err := Load(context.Background(), f.Path)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if f.Index == 0 {
				continue
			}
			want := engine.New()
			apply(want, evs[:m.Index*crashPerIndex])
			sameIndex(t, got, want, qs)
		}
	}
	t.Logf("temp files cleaned after kills: %d", sawTemp)
}
