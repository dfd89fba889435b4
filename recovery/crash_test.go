package recovery

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvidx/kvidx/engine"
	"github.com/kvidx/kvidx/wal"
)

// Environment of the crash campaign's child process.
const (
	envChildDir  = "KVIDX_RECOVERY_CHILD_DIR"
	envChildSeed = "KVIDX_RECOVERY_CHILD_SEED"
	envSnapEvery = "KVIDX_RECOVERY_SNAP_EVERY"
	envCycles    = "KVIDX_CRASH_CYCLES"
)

const crashSegmentSize = 4096 // many segment rollovers and truncations

// TestCrashChild is the child of TestCrashCampaign (skipped otherwise): it
// opens the store with SyncAlways, resumes the seeded batch stream after its
// recovered position, appends one batch at a time, snapshots every few
// appends, and prints each acknowledged index with its batch number, and
// each snapshot phase, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(envChildDir)
	if dir == "" {
		t.Skip("child of TestCrashCampaign")
	}
	seed, _ := strconv.ParseUint(os.Getenv(envChildSeed), 10, 64)
	every, _ := strconv.Atoi(os.Getenv(envSnapEvery))
	out := os.Stdout // unbuffered: one write per line
	s, err := Open(context.Background(), dir, Options{Sync: wal.SyncAlways, SegmentSize: crashSegmentSize, Logger: quietLogger()})
	if err != nil {
		fmt.Fprintf(out, "E open: %v\n", err)
		os.Exit(3)
	}
	s.hook = func(phase string, index uint64) { fmt.Fprintf(out, "P %s %d\n", phase, index) }
	applied, _ := s.Applied()
	fmt.Fprintf(out, "O %d\n", applied)
	for n := 1; n < 1_000_000; n++ {
		b := applied + uint64(n)
		idx, _, err := s.Append(context.Background(), genBatch(seed, b), []wal.Position{{Source: "gen", Seq: b}})
		if err != nil {
			fmt.Fprintf(out, "E append: %v\n", err)
			os.Exit(3)
		}
		fmt.Fprintf(out, "A %d %d\n", idx, b)
		if every > 0 && n%every == 0 {
			if _, _, err := s.Snapshot(context.Background()); err != nil {
				fmt.Fprintf(out, "E snapshot: %v\n", err)
				os.Exit(3)
			}
		}
	}
	s.Close()
}

// TestCrashCampaign SIGKILLs a child ingesting events at random moments
// (during appends, snapshot writes, publication, pruning and WAL front
// truncation) and checks after each restart that every acknowledged batch
// is applied, nothing never sent exists, and the state equals a fresh
// engine fed the batches of the surviving history. KVIDX_CRASH_CYCLES sets
// the number of cycles (default 24).
func TestCrashCampaign(t *testing.T) {
	if os.Getenv(envChildDir) != "" {
		t.Skip("in the child")
	}
	cycles := 24
	if v := os.Getenv(envCycles); v != "" {
		cycles, _ = strconv.Atoi(v)
	}
	if testing.Short() {
		cycles = min(cycles, 8)
	}
	dir := t.TempDir()
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("seed %d", seed)

	want := engine.New() // the model: batches 1..applied
	var applied uint64
	killedIn := map[string]int{}
	start := time.Now()
	for c := range cycles {
		acked, lastLine := runChild(t, dir, seed, rng)
		killedIn[lastLine]++
		acked = max(acked, applied) // the child may die before its first ack

		s, err := Open(context.Background(), dir, Options{Sync: wal.SyncAlways, SegmentSize: crashSegmentSize, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("cycle %d: restart: %v", c, err)
		}
		idx, pos := s.Applied()
		var seq uint64
		if len(pos) == 1 && pos[0].Source == "gen" {
			seq = pos[0].Seq
		} else if len(pos) != 0 || idx != 0 {
			t.Fatalf("cycle %d: positions %v at index %d", c, pos, idx)
		}
		switch {
		case idx != seq:
			t.Fatalf("cycle %d: applied index %d but batch %d", c, idx, seq)
		case idx < acked:
			t.Fatalf("cycle %d: acknowledged batch %d lost: recovered up to %d (report %+v)", c, acked, idx, s.Report())
		case idx > acked+1:
			t.Fatalf("cycle %d: recovered batch %d, only %d acknowledged and one more sent", c, idx, acked)
		case idx < applied:
			t.Fatalf("cycle %d: recovered %d, an earlier restart had %d", c, idx, applied)
		}
		for b := applied + 1; b <= idx; b++ {
			evs := genBatch(seed, b)
			for i := range evs {
				want.Apply(&evs[i])
			}
		}
		applied = idx
		sameState(t, s.Index(), want)
		first, _ := s.log.FirstIndex()
		for i := max(first, idx-min(idx, 5)+1); i <= idx; i++ {
			e, err := s.log.ReadEntry(i)
			if err != nil || len(e.Positions) != 1 || e.Positions[0].Seq != i {
				t.Fatalf("cycle %d: WAL entry %d: %+v, %v", c, i, e.Positions, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kill/restart cycles in %v, %d batches; last child line before the kill: %v", cycles, time.Since(start).Round(time.Millisecond), applied, killedIn)
}

// runChild starts a child on dir, kills it at a random moment and returns
// the highest acknowledged batch it printed and the kind of its last line.
func runChild(t *testing.T, dir string, seed uint64, rng *rand.Rand) (acked uint64, last string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	every := 1 + rng.IntN(6)
	cmd.Env = append(os.Environ(), envChildDir+"="+dir, envChildSeed+"="+strconv.FormatUint(seed, 10), envSnapEvery+"="+strconv.Itoa(every))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// Kill either after a random delay, or right after a chosen line (a
	// snapshot phase or an ack) plus a tiny random delay.
	var trigger string
	switch rng.IntN(5) {
	case 0:
		trigger = "P write"
	case 1:
		trigger = "P published"
	case 2:
		trigger = "P pruned"
	case 3:
		trigger = "A "
	}
	delay := time.Duration(rng.IntN(40_000)) * time.Microsecond
	if trigger != "" {
		delay = time.Duration(rng.IntN(1500)) * time.Microsecond
	}
	var timer <-chan time.Time
	opened, killed := false, false
	kill := func() {
		if !killed {
			killed = true
			cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	deadline := time.After(20 * time.Second)
	seen := 0
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				if !killed {
					t.Fatalf("child exited on its own, last line %q", last)
				}
				return acked, last
			}
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			switch f[0] {
			case "E":
				kill()
				t.Fatalf("child: %s", l)
			case "O":
				opened = true
				if trigger == "" {
					timer = time.After(delay)
				}
			case "A":
				idx, _ := strconv.ParseUint(f[1], 10, 64)
				b, _ := strconv.ParseUint(f[2], 10, 64)
				if idx != b || b <= acked && acked != 0 {
					kill()
					t.Fatalf("child acked index %d for batch %d after %d", idx, b, acked)
				}
				acked = b
			}
			last = f[0]
			if f[0] == "P" {
				last += " " + f[1]
			}
			if !killed && opened && trigger != "" && strings.HasPrefix(l, trigger) {
				if seen++; seen >= 1+rng.IntN(3) {
					timer = time.After(delay)
					trigger = "\x00" // fire once
				}
			}
		case <-timer:
			timer = nil
			kill()
		case <-deadline:
			kill()
			t.Fatalf("child did not reach its kill point (last line %q)", last)
		}
	}
}
