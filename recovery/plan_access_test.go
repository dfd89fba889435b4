package recovery

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// envAccessChild names the data directory that TestPlanWriteProblemCapabilities
// plans in its child process; envAccessWant is "1" when the child must find
// a write problem there, "0" when it must find none.
const (
	envAccessChild = "KVIDX_RECOVERY_ACCESS_DIR"
	envAccessWant  = "KVIDX_RECOVERY_ACCESS_WANT"
)

// The write problem is what the open of a restart meets, with the
// process's effective user and capabilities: a service running as its own
// user with CAP_DAC_OVERRIDE restarts on a root-owned data directory, so
// the plan finds nothing to report (access(2), which checks the real user
// without capabilities, reported that directory not writable, and recover
// --dry-run exited 1, while recover itself succeeded); without that
// capability it does report it. The child runs as uid 65534 with the
// capability given; the parent must be root to start it so.
func TestPlanWriteProblemCapabilities(t *testing.T) {
	if dir := os.Getenv(envAccessChild); dir != "" {
		p, _, err := Plan(context.Background(), dir, PlanOptions{})
		if err != nil {
			t.Fatalf("Plan as uid %d: %v", os.Geteuid(), err)
		}
		if want := os.Getenv(envAccessWant) == "1"; (p.WriteProblem != "") != want {
			t.Fatalf("as uid %d: write problem %q; want one: %v", os.Geteuid(), p.WriteProblem, want)
		}
		return
	}
	if os.Geteuid() != 0 {
		// Only root can start a process of another user with a
		// capability; the check itself is run as root by CI here.
		t.Logf("not root: the child with CAP_DAC_OVERRIDE cannot be started (uid %d)", os.Geteuid())
		return
	}
	dir := t.TempDir()
	planDir(t, dir)
	// The child's execve runs as uid 65534 before its capabilities take
	// effect: the test binary is copied where that user may run it (the
	// go tool's build directory and t.TempDir's are root's alone).
	bin := filepath.Join(t.TempDir(), "recovery.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		capa    uintptr // the child's one capability
		problem bool    // the child must find a write problem
	}{
		// CAP_DAC_READ_SEARCH alone: it reads the data, cannot write it.
		{"read search", unix.CAP_DAC_READ_SEARCH, true},
		{"dac override", unix.CAP_DAC_OVERRIDE, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := "0"
			if tt.problem {
				want = "1"
			}
			cmd := exec.Command(bin, "-test.run=^TestPlanWriteProblemCapabilities$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envAccessChild+"="+dir, envAccessWant+"="+want)
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Credential:  &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}},
				AmbientCaps: []uintptr{tt.capa, unix.CAP_DAC_READ_SEARCH},
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				// Not started (a noexec temporary directory, a
				// container that withholds the capability): nothing
				// here can run the check as another user.
				t.Skipf("child as uid 65534 with capability %d not started: %v", tt.capa, err)
			}
			if err != nil || !strings.Contains(string(out), "--- PASS: TestPlanWriteProblemCapabilities") {
				t.Fatalf("child (uid 65534, capability %d): %v\n%.3000s", tt.capa, err, out)
			}
		})
	}
}
