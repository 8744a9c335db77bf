package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// Process tests run real child processes: the fake app-server (this test binary re-executed, see
// TestMain) behind the real appserver client.

// fakeSpawner starts fake app-server children; modeFor picks the mode of the n-th spawn (from 1).
type fakeSpawner struct {
	modeFor func(n int) string
	log     *zap.Logger
	n       atomic.Int64
}

func (f *fakeSpawner) spawn(ctx context.Context, chatKey string) (Child, error) {
	n := int(f.n.Add(1))
	bin, env := appservertest.FakeCommand(f.modeFor(n))
	c, err := appserver.Start(ctx, appserver.Config{
		Bin: bin, Env: env, CloseGrace: 500 * time.Millisecond,
		Logger: f.log.With(zap.String("chat_key", chatKey)),
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func mode(first, rest string) func(int) string {
	return func(n int) string {
		if n == 1 {
			return first
		}
		return rest
	}
}

func testLogger(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// processCfg is the base config of process tests: no crash backoff in the way of recovery. The
// handshake timeout and the interrupt grace are hang guards here, far above what a child that
// works needs on a loaded machine; tests of those watchdogs set them lower.
func processCfg(t *testing.T, modeFor func(int) string) Config {
	log := testLogger(t)
	return Config{
		Spawn:               (&fakeSpawner{modeFor: modeFor, log: log}).spawn,
		MaxChildren:         8,
		MemoryBudget:        -1, // the count cap alone, whatever the machine's free memory
		HandshakeTimeout:    30 * time.Second,
		InterruptGrace:      30 * time.Second,
		CrashBackoffInitial: time.Nanosecond,
		CrashBackoffMax:     time.Nanosecond,
		Logger:              log,
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// processGone reports whether pid no longer exists (reaped) or is not our child any more.
func processGone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return errors.Is(err, os.ErrNotExist)
}

// waitFor polls an observable condition of real processes, bounded.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func TestProcessWatchdogs(t *testing.T) {
	t.Parallel()
	const stored = "0199aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee"
	tests := []struct {
		mode     string
		cfg      func(*Config)
		watchdog string
		retired  bool
	}{
		{appservertest.FakeNoComplete, func(c *Config) { c.TurnDeadline = 300 * time.Millisecond }, WatchdogTurn, false},
		{appservertest.FakeQuietAfterTool, func(c *Config) { c.PostToolQuiet = 300 * time.Millisecond }, WatchdogPostTool, true},
		{appservertest.FakeExitMidTurn, nil, WatchdogDead, true},
		{appservertest.FakeGarbage, nil, WatchdogDead, true},
		{appservertest.FakeIgnoreInterrupt, func(c *Config) {
			// The deadline also bounds the recovery turn below, in a new child: on a loaded
			// machine 300 ms was not always enough for it (a fresh-clone CI run beside a stress
			// run), while the hung first turn is cut by the deadline whatever its length.
			c.TurnDeadline = 3 * time.Second
			c.InterruptGrace = 300 * time.Millisecond
		}, WatchdogWedged, true},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			cfg := processCfg(t, mode(tc.mode, appservertest.FakeOK))
			cfg.Store = newTestStore("a", stored)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer shutdown(t, s)
			ctx := testCtx(t)

			r, err := s.Submit(ctx, "a", "hello")
			var we *WatchdogError
			if !errors.As(err, &we) || we.Watchdog != tc.watchdog {
				t.Fatalf("err = %v, want watchdog %s", err, tc.watchdog)
			}
			if r.ThreadID != stored || we.PID == 0 {
				t.Fatalf("reply %+v, watchdog pid %d", r, we.PID)
			}
			st := s.Status()
			if !tc.retired {
				if processGone(we.PID) || st.Totals.Live != 1 || st.Children[0].State != StateIdle {
					t.Fatalf("child should stay warm after an honoured interrupt: %+v", st)
				}
				return
			}
			// Retired means closed and reaped before Submit returned.
			if !processGone(we.PID) || st.Totals.Live != 0 || st.Totals.Retired[tc.watchdog] != 1 {
				t.Fatalf("pid %d gone=%v, totals %+v", we.PID, processGone(we.PID), st.Totals)
			}
			r2, err := s.Submit(ctx, "a", "again")
			if err != nil {
				t.Fatal(err)
			}
			if r2.ThreadID != stored || r2.PID == we.PID || r2.Text != "reply #1: again" {
				t.Fatalf("recovery %+v", r2)
			}
			if got := s.Status().Children[0].Restarts; got != 1 {
				t.Fatalf("restarts %d", got)
			}
		})
	}
}

func TestProcessHandshakeTimeout(t *testing.T) {
	t.Parallel()
	// slow-start answers initialize after a minute. The one timeout also bounds the healthy
	// child that follows, so it is a bound that child's start never comes near on a loaded
	// machine, not the shortest that usually works.
	cfg := processCfg(t, mode(appservertest.FakeSlowStart, appservertest.FakeOK))
	cfg.HandshakeTimeout = 10 * time.Second
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	ctx := testCtx(t)
	_, err = s.Submit(ctx, "a", "hi")
	var we *WatchdogError
	if !errors.As(err, &we) || we.Watchdog != WatchdogHandshake || !errors.Is(err, appserver.ErrHandshakeTimeout) {
		t.Fatalf("err = %v, want handshake watchdog", err)
	}
	r, err := s.Submit(ctx, "a", "hi")
	if err != nil || r.Text != "reply #1: hi" {
		t.Fatalf("after handshake timeout: %+v %v", r, err)
	}
}

func TestProcessChildrenRecorded(t *testing.T) {
	t.Parallel()
	cfg := processCfg(t, mode(appservertest.FakeOK, appservertest.FakeOK))
	cfg.StateDir = t.TempDir()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Submit(testCtx(t), "a", "hi")
	if err != nil {
		t.Fatal(err)
	}
	f := readChildrenFile(t, cfg.StateDir)
	st, err := childproc.ProcFS{}.Stat(r.PID)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if len(f.Children) != 1 || f.Children[0].PID != r.PID || f.Children[0].StartTime != st.StartTime ||
		f.Children[0].ChatKey != "a" || f.DaemonPID != os.Getpid() {
		t.Fatalf("record %+v, want pid %d start %d", f, r.PID, st.StartTime)
	}
	if resolved, _ := filepath.EvalSymlinks(exe); f.Children[0].Exe != resolved {
		t.Fatalf("record exe %q, want %q", f.Children[0].Exe, resolved)
	}
	// The child leads its own process group and session, which the boot sweep uses to find what
	// it left behind; the record is of this boot.
	if c := f.Children[0]; c.PGID != r.PID || c.SID != r.PID || f.BootID == "" || f.BootID != (childproc.ProcFS{}).BootID() {
		t.Fatalf("record %+v (boot %q), want pgid and sid %d and this boot's id", c, f.BootID, r.PID)
	}
	shutdown(t, s)
	if f := readChildrenFile(t, cfg.StateDir); len(f.Children) != 0 {
		t.Fatalf("records left after shutdown: %+v", f.Children)
	}
}

func readChildrenFile(t *testing.T, dir string) childproc.RecordFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ChildrenFile))
	if err != nil {
		t.Fatal(err)
	}
	var f childproc.RecordFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// startOrphan starts a fake app-server the way appserver does (own process group) but owned by
// the test, standing in for a child of a daemon that was SIGKILLed. Its stdin stays open so it
// does not exit on its own.
func startOrphan(t *testing.T, fakeMode string) (*exec.Cmd, childproc.Record) {
	t.Helper()
	bin, env := appservertest.FakeCommand(fakeMode)
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The fake's first stderr line comes after it set up its signal handling (stubborn ignores
	// SIGTERM): only then does it stand for a running codex.
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "fake app-server: pid") {
		t.Fatalf("orphan did not come up: %q %v", line, err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	id := childproc.ReadIdentity(cmd.Process.Pid)
	if id.StartTime == 0 {
		t.Fatalf("no /proc identity for pid %d", cmd.Process.Pid)
	}
	return cmd, childproc.Record{PID: cmd.Process.Pid, StartTime: id.StartTime, Exe: id.Exe, ChatKey: "orphan-" + fakeMode}
}

func TestProcessBootSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	polite, politeRec := startOrphan(t, appservertest.FakeOK)
	stubborn, stubbornRec := startOrphan(t, appservertest.FakeStubborn)
	stranger, strangerRec := startOrphan(t, appservertest.FakeOK)
	strangerRec.StartTime++ // same pid, another start time: a reused pid that must not be touched
	gone := childproc.Record{PID: 1 << 30, StartTime: 7, ChatKey: "long-gone"}

	old := childproc.RecordFile{DaemonPID: 999999, Children: []childproc.Record{politeRec, stubbornRec, strangerRec, gone}}
	b, _ := json.Marshal(old)
	if err := os.WriteFile(filepath.Join(dir, ChildrenFile), b, 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := processCfg(t, mode(appservertest.FakeOK, appservertest.FakeOK))
	cfg.StateDir = dir
	// The stubborn orphan waits out one grace; the others are gone once they ran their signal
	// handling, which the grace must leave a loaded machine time for.
	cfg.SweepGrace = 2 * time.Second
	start := time.Now()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	t.Logf("boot sweep took %s", time.Since(start))

	// Both orphans were signalled; the test binary is their parent, so it reaps them here.
	if err := polite.Wait(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("polite orphan: %v, want killed by SIGTERM", err)
	}
	if err := stubborn.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("stubborn orphan: %v, want killed by SIGKILL", err)
	}
	if st, err := (childproc.ProcFS{}).Stat(stranger.Process.Pid); err != nil || st.Zombie() {
		t.Fatalf("process with a mismatching start time was killed: %+v %v", st, err)
	}
	if f := readChildrenFile(t, dir); len(f.Children) != 0 || f.DaemonPID != os.Getpid() {
		t.Fatalf("children file not rewritten: %+v", f)
	}
}

func TestSweepActions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, rec := startOrphan(t, appservertest.FakeStubborn)
	b, _ := json.Marshal(childproc.RecordFile{Children: []childproc.Record{rec, {PID: 1 << 30, StartTime: 1}}})
	if err := os.WriteFile(filepath.Join(dir, ChildrenFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// The grace must leave a loaded machine time to end the SIGKILLed orphan; only the SIGTERM
	// it ignores is waited out in full.
	got, err := SweepOrphans(testCtx(t), dir, 2*time.Second, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Action != childproc.SweepKilled || got[1].Action != childproc.SweepGone {
		t.Fatalf("sweep = %+v", got)
	}
	// A corrupt record is reported, not guessed at.
	if err := os.WriteFile(filepath.Join(dir, ChildrenFile), []byte("{nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := SweepOrphans(testCtx(t), dir, time.Millisecond, nil); err == nil {
		t.Fatal("corrupt children file accepted")
	}
	if got, err := SweepOrphans(testCtx(t), t.TempDir(), time.Millisecond, nil); err != nil || got != nil {
		t.Fatalf("missing file: %v %v", got, err)
	}
}

func TestProcessShutdownWithTurnsInFlight(t *testing.T) {
	cfg := processCfg(t, mode(appservertest.FakeNoComplete, appservertest.FakeNoComplete))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	keys := []string{"a", "b", "c"}
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { _, errs[i] = s.Submit(ctx, k, "work") })
	}
	waitFor(t, "three busy children", func() bool { return s.Status().Totals.Busy == 3 })
	var pids []int
	for _, c := range s.Status().Children {
		pids = append(pids, c.PID)
	}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the drain deadline", err)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("turn %s: %v, want interrupted by shutdown", keys[i], err)
		}
	}
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("pid %d still exists after Shutdown", pid)
		}
	}
	goleak.VerifyNone(t)
}

// TestProcessLoad runs many keys against a cap well below them (under the race detector in CI).
// Each key sends its messages in bursts, so turns queue per key, keys wait for slots, and idle
// children are evicted between bursts.
func TestProcessLoad(t *testing.T) {
	t.Parallel()
	keys, bursts, burst, limit := 50, 4, 5, 8 // 50 keys × 20 messages
	if testing.Short() {
		keys, bursts = 12, 2
	}
	cfg := processCfg(t, mode(appservertest.FakeOK, appservertest.FakeOK))
	cfg.MaxChildren = limit
	cfg.Logger = zap.NewNop()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	ctx := testCtx(t)

	stop := make(chan struct{})
	var maxLive atomic.Int64
	var monitor sync.WaitGroup
	monitor.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if live := int64(s.Status().Totals.Live); live > maxLive.Load() {
				maxLive.Store(live)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})

	type result struct {
		key, text string
		r         Reply
		err       error
	}
	results := make(chan result, keys*bursts*burst)
	start := time.Now()
	var senders sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		senders.Go(func() {
			for b := range bursts {
				var wg sync.WaitGroup
				for i := range burst {
					text := fmt.Sprintf("%s-b%d-m%d", key, b, i)
					wg.Go(func() {
						r, err := s.Submit(ctx, key, text)
						results <- result{key, text, r, err}
					})
				}
				wg.Wait()
			}
		})
	}
	senders.Wait()
	close(stop)
	monitor.Wait()
	close(results)

	threads := map[string]string{}
	seen := map[string]bool{} // pid/turn number: a merged (overlapping) turn would repeat one
	for res := range results {
		if res.err != nil {
			t.Errorf("%s: %v", res.text, res.err)
			continue
		}
		var n int
		if _, err := fmt.Sscanf(res.r.Text, "reply #%d:", &n); err != nil || !strings.HasSuffix(res.r.Text, ": "+res.text) {
			t.Errorf("%s: reply %q", res.text, res.r.Text)
		}
		if th, ok := threads[res.key]; ok && th != res.r.ThreadID {
			t.Errorf("%s: thread %s, earlier %s", res.text, res.r.ThreadID, th)
		}
		threads[res.key] = res.r.ThreadID
		id := fmt.Sprintf("%d/%d", res.r.PID, n)
		if seen[id] {
			t.Errorf("%s: pid/turn %s seen twice", res.text, id)
		}
		seen[id] = true
	}
	st := s.Status()
	t.Logf("%d keys × %d messages, cap %d: %s; retired %v", keys, bursts*burst, limit, time.Since(start), st.Totals.Retired)
	if st.Totals.Turns != int64(keys*bursts*burst) || maxLive.Load() > int64(limit) || st.Totals.Retired[ReasonEvicted] == 0 {
		t.Fatalf("turns %d, max live %d (cap %d), retired %v", st.Totals.Turns, maxLive.Load(), limit, st.Totals.Retired)
	}
}
