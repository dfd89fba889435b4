package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvidx/kvidx/recovery"
)

// servingAddr matches the log line that tells where the server listens.
var servingAddr = regexp.MustCompile(`msg=serving addr=(\S+)`)

// storeChain is NDJSON for one Stored event of worker w: blocks with local
// hashes ths, named by their position in the chain.
func storeChain(w int, id int, ths ...int) string {
	var blocks []string
	for i, th := range ths {
		blocks = append(blocks, fmt.Sprintf(`{"block_hash":%d,"tokens_hash":%d}`, id*1000+i+1, th))
	}
	return fmt.Sprintf(`{"worker_id":%d,"event":{"event_id":%d,"data":{"stored":{"blocks":[%s]}}}}`+"\n", w, id, strings.Join(blocks, ","))
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// serveInProcess runs `kvidx serve` on a free loopback port until ctx ends
// and returns its base URL and a channel with its result.
func serveInProcess(t *testing.T, ctx context.Context, args ...string) (string, <-chan error) {
	t.Helper()
	base, done := serveListening(t, ctx, args...)
	waitReady(t, base)
	return base, done
}

// serveListening is serveInProcess without waiting for readiness.
func serveListening(t *testing.T, ctx context.Context, args ...string) (string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	cmd := newRootCmd()
	cmd.SetArgs(append([]string{"serve", "--listen", "127.0.0.1:0"}, args...))
	cmd.SetErr(pw)
	cmd.SetOut(io.Discard)
	done := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := servingAddr.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, pr)
			return "http://" + m[1], done
		}
	}
	t.Fatalf("serve stopped before listening: %v", <-done)
	return "", nil
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatal("server not ready after 20s")
}

// Events in, matches out, stop, start again on the same data directory:
// the same answers, with the index grown as needed or reserved at start. A
// restart after a clean stop replays nothing (issue 6: the final snapshot
// holds it all); without the final snapshot it replays the one entry.
func TestServeRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    []string
		replayed int
	}{
		{"grown", nil, 0},
		{"reserved", []string{"--reserve-blocks", "100000", "--reserve-workers", "4"}, 0},
		{"no final snapshot", []string{"--final-snapshot=false"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"--data-dir", dir}, tc.flags...)
			ctx, cancel := context.WithCancel(context.Background())
			base, done := serveInProcess(t, ctx, args...)
			if code, body := post(t, base+"/v1/events", storeChain(0, 1, 1, 2, 3)+storeChain(1, 2, 1, 2)); code != 200 {
				t.Fatalf("events: %d %s", code, body)
			}
			_, before := post(t, base+"/v1/match", `{"local_hashes":[1,2,3]}`)
			want := `{"scores":[{"worker_id":0,"dp_rank":0,"matched_blocks":3},{"worker_id":1,"dp_rank":0,"matched_blocks":2}],"query_blocks":3}`
			if strings.TrimSpace(before) != want {
				t.Fatalf("match: %s", before)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("serve: %v", err)
			}
			ctx2, cancel2 := context.WithCancel(context.Background())
			defer cancel2()
			base, done = serveInProcess(t, ctx2, args...)
			if _, after := post(t, base+"/v1/match", `{"local_hashes":[1,2,3]}`); after != before {
				t.Fatalf("after restart: %s, before: %s", after, before)
			}
			resp, err := http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("\nkvidx_recovery_replayed_entries %d\n", tc.replayed); !strings.Contains(string(metrics), want) {
				t.Fatalf("after restart, /metrics lacks %q:\n%s", strings.TrimSpace(want), metrics)
			}
			cancel2()
			if err := <-done; err != nil {
				t.Fatalf("serve: %v", err)
			}
		})
	}
}

// A child serve process is killed with SIGKILL while clients post; every
// acknowledged event is there after a restart.
func TestServeKill9(t *testing.T) {
	if os.Getenv("KVIDX_SERVE_CHILD") != "" {
		t.Skip("running as the child")
	}
	dir := t.TempDir()
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$")
		cmd.Env = append(os.Environ(), "KVIDX_SERVE_CHILD="+dir)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingAddr.FindStringSubmatch(sc.Text()); m != nil {
				go io.Copy(io.Discard, stderr)
				base := "http://" + m[1]
				waitReady(t, base)
				return cmd, base
			}
		}
		cmd.Wait()
		t.Fatal("child stopped before listening")
		return nil, ""
	}
	child, base := start()
	// Post chains from 4 clients until the kill; remember what was acknowledged.
	acked := make(chan int, 100000)
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for c := range 4 {
		clients.Go(func() {
			for id := c + 1; ; id += 4 {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(base+"/v1/events", "application/x-ndjson", strings.NewReader(storeChain(id, id, id, id+1, id+2)))
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					acked <- id
				}
			}
		})
	}
	// Kill it mid-load, once something was acknowledged (on a loaded
	// machine the first fsynced answers may take longer than 300 ms).
	time.Sleep(300 * time.Millisecond)
	for deadline := time.Now().Add(20 * time.Second); len(acked) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	close(stop)
	clients.Wait()
	close(acked)
	var ids []int
	for id := range acked {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		t.Fatal("nothing was acknowledged before the kill")
	}
	child, base = start()
	defer func() { child.Process.Signal(syscall.SIGTERM); child.Wait() }()
	for _, id := range ids {
		q := fmt.Sprintf(`{"local_hashes":[%d,%d,%d],"candidates":[{"worker_id":%d}]}`, id, id+1, id+2, id)
		_, body := post(t, base+"/v1/match", q)
		if !bytes.Contains([]byte(body), []byte(`"matched_blocks":3`)) {
			t.Fatalf("acknowledged chain %d missing after kill -9 and restart: %s", id, body)
		}
	}
	t.Logf("%d acknowledged requests survived kill -9", len(ids))
}

// TestServeChild is the child of TestServeKill9: a serve process.
func TestServeChild(t *testing.T) {
	dir := os.Getenv("KVIDX_SERVE_CHILD")
	if dir == "" {
		t.Skip("only runs as TestServeKill9's child")
	}
	cmd := newRootCmd()
	cmd.SetArgs([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--snapshot-every-events", "50"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
}

func TestServeRejectsBadZMQFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		zmq  []string
		want string
	}{
		{"no worker id", []string{"tcp://127.0.0.1:1"}, "want ENDPOINT=WORKER_ID"},
		{"endpoint twice", []string{"tcp://127.0.0.1:1=1", "tcp://127.0.0.1:1=2"}, "given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}
			for _, z := range tc.zmq {
				args = append(args, "--zmq", z)
			}
			_, _, err := runKvidx(t, "", args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Values the server would silently replace by its defaults are refused.
func TestServeRejectsBadValues(t *testing.T) {
	for _, tc := range []struct{ flag, value string }{
		{"--block-size", "0"}, {"--block-size", "-5"}, {"--keep-snapshots", "0"},
		{"--max-body-bytes", "-1"}, {"--sync-interval", "-1s"}, {"--snapshot-interval", "-1m"},
		{"--nats-stream", "S"}, {"--nats-subject", "a.b"}, {"--nats-allow-gap", "true"}, {"--nats-fetch-max-bytes", "1024"}, // without --nats-url
		{"--nats-fetch-max-bytes", "0"},
		{"--reserve-blocks", "-1"}, {"--reserve-blocks", "1000"}, {"--reserve-workers", "8"}, // without the other
		{"--reserve-blocks", "2000000000"},
		// Empty values: the current directory as data directory; every
		// interface, on a random port, past the loopback warning.
		{"--data-dir", ""}, {"--listen", ""},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			args := []string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", tc.flag + "=" + tc.value}
			_, _, err := runKvidx(t, "", args...)
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("err = %v, want one naming %s", err, tc.flag)
			}
		})
	}
}

// serve's sync flags default to the WAL's own defaults: fsync before
// acknowledging, and under --sync interval at most every 5 ms (the loss
// window the docs state).
func TestServeSyncDefaults(t *testing.T) {
	serve, _, err := newRootCmd().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ flag, want string }{
		{"sync", "always"},
		{"sync-interval", "5ms"},
	} {
		fl := serve.Flags().Lookup(tc.flag)
		if fl == nil {
			t.Errorf("serve has no --%s", tc.flag)
			continue
		}
		if fl.DefValue != tc.want || fl.Value.String() != tc.want {
			t.Errorf("--%s defaults to %q (value %q), want %q", tc.flag, fl.DefValue, fl.Value, tc.want)
		}
	}
}

// Zero or negative counts, and unknown subcommands of a command group, are
// errors with a non-zero exit, not defaults or a help page.
func TestCLIRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"loadgen", "--concurrency", "0"},
		{"loadgen", "--posters", "0"},
		{"loadgen", "--duration", "0"},
		{"loadgen", "--duplicate", "100000"},
		{"bench", "--workers", "2147483647"},
		{"inspect", "summ"},
		{"wal", "foo"},
		{"inspect", "entries", "x.bolt", "--from", "5", "--to", "1"},
		{"wal", "dump", ".", "--from", "7", "--to", "5"},
	} {
		if _, _, err := runKvidx(t, "", args...); err == nil {
			t.Errorf("kvidx %v: no error", args)
		}
	}
	// A --duplicate whose request count overflows int is refused as too
	// many, with a sane estimate (the count wrapped and generation began).
	_, _, err := runKvidx(t, "", "loadgen", "--duplicate", "4611686018427387904")
	if err == nil || !strings.Contains(err.Error(), "at most 2097152 requests") || strings.Contains(err.Error(), "about -") {
		t.Errorf("loadgen --duplicate 2^62: %v", err)
	}
}

// A server started with --sync none warns that acknowledged events can be
// lost; the other policies do not. (A bad --zmq flag stops serve right after
// the warning, before it opens anything.)
func TestServeWarnsSyncNone(t *testing.T) {
	for _, policy := range []string{"none", "interval", "always"} {
		t.Run(policy, func(t *testing.T) {
			_, stderr, err := runKvidx(t, "", "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--sync", policy, "--zmq", "tcp://127.0.0.1:1")
			if err == nil || !strings.Contains(err.Error(), "want ENDPOINT=WORKER_ID") {
				t.Fatalf("err = %v", err)
			}
			warned := strings.Contains(stderr, "level=WARN") && strings.Contains(stderr, "--sync none") && strings.Contains(stderr, "can lose them")
			if warned != (policy == "none") {
				t.Fatalf("--sync %s: warned %v; stderr:\n%s", policy, warned, stderr)
			}
		})
	}
}

// The API has no authentication: serve warns when --listen is not a
// loopback address (issue 6), in either --log-format. The runs stop at the
// malformed --zmq, after the warning and before anything listens.
func TestServeWarnsBeyondLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen, format string
		warn           bool
	}{
		{"127.0.0.1:0", "text", false},
		{"127.0.0.5:0", "text", false},
		{"localhost:0", "text", false},
		{"[::1]:0", "text", false},
		{"0.0.0.0:0", "text", true},
		{":0", "text", true},
		{"[::]:0", "text", true},
		{"192.0.2.1:0", "text", true},
		{"127.0.0.1:0", "json", false},
		{"0.0.0.0:0", "json", true},
	} {
		t.Run(tc.format+"/"+tc.listen, func(t *testing.T) {
			_, stderr, err := runKvidx(t, "", "serve", "--data-dir", t.TempDir(), "--listen", tc.listen, "--log-format", tc.format, "--zmq", "tcp://127.0.0.1:1")
			if err == nil || !strings.Contains(err.Error(), "want ENDPOINT=WORKER_ID") {
				t.Fatalf("err = %v", err)
			}
			level := "level=WARN"
			if tc.format == "json" {
				level = `"level":"WARN"`
			}
			warned := strings.Contains(stderr, level) && strings.Contains(stderr, "no authentication") && strings.Contains(stderr, tc.listen)
			if warned != tc.warn {
				t.Fatalf("--listen %s: warned %v, want %v; stderr:\n%s", tc.listen, warned, tc.warn, stderr)
			}
		})
	}
}

// A SIGTERM or SIGINT while serve recovers is a clean stop (found by
// review): one that interrupts a snapshot load ends serve without an error,
// and one that a short WAL replay finishes despite (it looks at the
// context about once a second) still gets the shutdown's final snapshot,
// so that the next start replays nothing.
func TestServeStopDuringRecovery(t *testing.T) {
	t.Run("snapshot load", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		ctx, cancel := context.WithCancel(context.Background())
		base, done := serveInProcess(t, ctx, "--data-dir", dir, "--sync", "none")
		var body strings.Builder
		for i := range 25000 {
			body.WriteString(storeChain(i%64+1, i+1, i*8+1, i*8+2, i*8+3, i*8+4, i*8+5, i*8+6, i*8+7, i*8+8))
		}
		if code, resp := post(t, base+"/v1/events", body.String()); code != 200 {
			t.Fatal(code, resp)
		}
		cancel() // the final snapshot holds it all
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		_, done = serveListening(t, ctx, "--data-dir", dir)
		cancel() // while the snapshot loads
		if err := <-done; err != nil {
			t.Errorf("stopped during recovery: %v, want a clean stop", err)
		}
	})
	t.Run("short replay", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		ctx, cancel := context.WithCancel(context.Background())
		base, done := serveInProcess(t, ctx, "--data-dir", dir, "--sync", "none", "--final-snapshot=false")
		for i := range 4 {
			if code, resp := post(t, base+"/v1/events", storeChain(i+1, i+1, i+1)); code != 200 {
				t.Fatal(code, resp)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		_, done = serveListening(t, ctx, "--data-dir", dir)
		cancel() // the replay of 4 entries finishes anyway
		if err := <-done; err != nil {
			t.Fatalf("stopped during recovery: %v, want a clean stop", err)
		}
		snaps, err := os.ReadDir(filepath.Join(dir, "snapshots"))
		if err != nil || len(snaps) != 1 {
			t.Fatalf("snapshots after the stop: %v, %v; want the final one", snaps, err)
		}
	})
}

// A reservation beyond the machine's available memory is refused with a
// clear error; it died in the runtime, out of memory, with a stack trace
// (found by review).
func TestServeRefusesReservationBeyondMemory(t *testing.T) {
	const blocks = 1 << 30
	if avail := memAvailable(); avail == 0 || avail >= blocks*55 {
		t.Skipf("available memory %d: the reservation would fit or cannot be checked", avail)
	}
	_, _, err := runKvidx(t, "", "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--reserve-blocks", fmt.Sprint(blocks), "--reserve-workers", "1")
	if err == nil || !strings.Contains(err.Error(), "reserve less") {
		t.Fatalf("serve with a reservation beyond memory: %v", err)
	}
}

// cobra's own completion command is a command group too: an unknown shell
// ("kvidx completion bsh") is an error with a non-zero exit, not its help
// page and exit 0; bare, it prints its help.
func TestCompletionRefusesUnknownShell(t *testing.T) {
	if _, _, err := runKvidx(t, "", "completion", "bsh"); err == nil || !strings.Contains(err.Error(), `unknown command "bsh"`) {
		t.Errorf("kvidx completion bsh: err = %v, want an unknown command", err)
	}
	stdout, _, err := runKvidx(t, "", "completion")
	if err != nil || !strings.Contains(stdout, "bash") {
		t.Errorf("kvidx completion: err = %v, stdout %q, want its help", err, stdout)
	}
}

// kvidx completion SHELL writes its script to the command's output, as
// every other command does: a tree whose output is redirected (SetOut)
// gets the script there, not on the process's stdout.
func TestCompletionScriptGoesToCommandOutput(t *testing.T) {
	for shell, want := range map[string]string{
		"bash":       "bash completion V2 for kvidx",
		"zsh":        "#compdef kvidx",
		"fish":       "fish completion for kvidx",
		"powershell": "powershell completion for kvidx",
	} {
		stdout, _, err := runKvidx(t, "", "completion", shell)
		if err != nil || !strings.Contains(stdout, want) {
			t.Errorf("kvidx completion %s: err = %v, stdout %d bytes, want the script (%q)", shell, err, len(stdout), want)
		}
	}
}

// A start that fails without any signal (a data directory another server
// holds, a refusal) stops serve's signal handling on its way out: that is
// no shutdown a second signal could cut short, and serve must not log one
// (found by review: the locked directory's error came after "shutting
// down; a second SIGTERM or SIGINT stops at once").
func TestServeFailedStartLogsNoShutdown(t *testing.T) {
	tests := []struct {
		name string
		// prepare makes dir fail serve's start with an error holding want.
		prepare func(t *testing.T, dir string)
		want    string
	}{
		{"locked", func(t *testing.T, dir string) {
			s, err := recovery.Open(context.Background(), dir, recovery.Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
		}, "in use by another writer"},
		{"refused FORMAT", func(t *testing.T, dir string) {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, recovery.FormatFileName), []byte("not kvidx\n"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, recovery.FormatFileName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			tt.prepare(t, dir)
			_, stderr, err := runKvidx(t, "", "serve", "--data-dir", dir, "--listen", "127.0.0.1:0")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("serve: %v; want an error holding %q", err, tt.want)
			}
			if strings.Contains(stderr, "shutting down") {
				t.Fatalf("serve that failed to start logged a shutdown:\n%s", stderr)
			}
		})
	}
}
