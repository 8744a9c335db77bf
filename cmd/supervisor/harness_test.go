//go:build linux

package main

// The end-to-end harness: the daemon runs as a real process (this test binary in helper-process
// mode, see TestMain), with the real codex binary pointed at mockmodel.Model on loopback
// and, in Molecule mode, the fake platform of inbox/molecule/moleculetest on loopback. Tests wait on what
// the platform and the mock recorded, or on the daemon's status socket, always with a deadline;
// nothing sleeps for synchronization.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/sessions"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Bounds of the harness. They are generous: they only decide how long a broken daemon takes to
// fail a test, never how long a working one takes to pass.
const (
	waitTimeout  = 60 * time.Second // any awaited condition
	readyTimeout = 30 * time.Second // daemon start until its control socket answers
	stopTimeout  = 30 * time.Second // SIGTERM until exit, unless a test asks for less
	pollInterval = "50ms"           // --poll-interval of every Molecule daemon
)

// e2eConfig configures one end-to-end environment.
type e2eConfig struct {
	// Script is the mock model's reply policy; nil means mockmodel.DefaultScript.
	Script func(mockmodel.Request) mockmodel.Reply
	// Authorize is the mock model's check of codex's bearer token; nil accepts any.
	Authorize func(bearer string) bool
	// Platform configures the fake Molecule platform (Molecule mode only).
	Platform moleculetest.Config
	// Local runs the daemon with the local HTTP inbox instead of the Molecule platform.
	Local bool
	// Env is added to every daemon's environment (after the harness's own variables).
	Env []string
	// CanonicalEnv names the platform with the Molecule runtime's canonical variables
	// (MOLECULE_API_URL, MOLECULE_WORKSPACE_ID) instead of PLATFORM_URL and WORKSPACE_ID, and
	// leaves the inbox to the daemon's choice (no --inbox flag).
	CanonicalEnv bool
	// TLS serves the mock model over TLS (https, wss) with a CA it generates; the daemons get
	// SSL_CERT_FILE naming it, so codex children trust it, as production reaches the model.
	TLS bool
	// Bin is the daemon's executable; empty means this test binary. A reload test copies the
	// test binary there so that it can replace the file on disk.
	Bin string
}

// e2e is one environment: a mock model, a CODEX_HOME pointing at it, a state directory, and in
// Molecule mode a fake platform. Daemons started from it share all of these, so a second daemon
// is a restart of the first.
type e2e struct {
	t         *testing.T
	codexBin  string
	mock      *mockmodel.Model
	plat      *moleculetest.Platform // nil in local mode
	local     bool
	canonical bool
	extraEnv  []string
	bin       string
	root      string
	codexHome string
	workDir   string
	stateDir  string
	daemons   []*daemonProc
	modelHold func()                     // releases the model's port held by takeModelAway
	procAttr  func(*syscall.SysProcAttr) // changes how daemons are started (a PID namespace)
}

func newE2E(t *testing.T, cfg e2eConfig) *e2e {
	t.Helper()
	bin := appservertest.CodexBin(t)
	// Not t.TempDir: the control socket path must stay under the 108-byte limit of unix socket
	// addresses, and test names make TempDir paths long.
	root, err := os.MkdirTemp("", "cwe2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept the failed test's files in %s", root)
			return
		}
		_ = os.RemoveAll(root)
	})
	mock, err := mockmodel.New(mockmodel.Config{Script: cfg.Script, Authorize: cfg.Authorize, TLS: cfg.TLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mock.Close(); err != nil {
			t.Errorf("mock model close: %v", err)
		}
	})
	e := &e2e{
		t:         t,
		codexBin:  bin,
		mock:      mock,
		local:     cfg.Local,
		canonical: cfg.CanonicalEnv,
		extraEnv:  cfg.Env,
		bin:       cfg.Bin,
		root:      root,
		codexHome: filepath.Join(root, "codex-home"),
		workDir:   filepath.Join(root, "work"),
		stateDir:  filepath.Join(root, "state"),
	}
	for _, d := range []string{e.codexHome, e.workDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := mock.WriteCodexHome(e.codexHome); err != nil {
		t.Fatal(err)
	}
	if cfg.TLS {
		ca := filepath.Join(root, "mock-ca.pem")
		if err := mock.WriteCA(ca); err != nil {
			t.Fatal(err)
		}
		e.extraEnv = append(e.extraEnv[:len(e.extraEnv):len(e.extraEnv)], "SSL_CERT_FILE="+ca)
	}
	if !cfg.Local {
		// The daemons poll every 50 ms, a hundred times the production 5 s: unless a test sets
		// its own, the platform's rate window is scaled the same way (600 requests in 600 ms),
		// so a daemon meets the limit as often as in production.
		if cfg.Platform.RateWindow == 0 {
			cfg.Platform.RateWindow = moleculetest.DefaultRateWindow / 100
		}
		e.plat = moleculetest.NewPlatform(t, cfg.Platform)
	}
	// Registered last so it runs first: daemons stop before the mock and the platform close.
	t.Cleanup(e.cleanup)
	return e
}

// threadsPerChildEnv names the variable that runs the suite's daemons with shared children
// (--threads-per-child): make test-shared sets it to 8. The daemon's own variable is not passed
// through, as no CODEX_WARM_ variable of the test's environment is.
const threadsPerChildEnv = "CODEX_WARM_TEST_THREADS_PER_CHILD"

// testThreadsPerChild is threadsPerChildEnv's value, "" when unset (one thread per child).
func testThreadsPerChild() string { return strings.TrimSpace(os.Getenv(threadsPerChildEnv)) }

// childrenFor is how many codex children chats warm chats take: one each, or N to a child
// with shared children.
func childrenFor(t *testing.T, chats int) int {
	t.Helper()
	s := testThreadsPerChild()
	if s == "" {
		return chats
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a count >= 1", threadsPerChildEnv, s)
	}
	return (chats + n - 1) / n
}

// env is the daemon's environment: the test's, minus anything that would configure the daemon
// behind the test's back, plus the Molecule variables the Python daemon's deployment sets.
func (e *e2e) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PLATFORM_URL", k == "WORKSPACE_ID", k == "CODEX_HOME", k == "CONFIGS_DIR",
			k == "CODEX_CHANNEL_MOLECULE_STATE_DIR", k == "CODEX_BIN", k == "GORACE",
			strings.HasPrefix(k, "MOLECULE_"), strings.HasPrefix(k, "CODEX_WARM_"):
			continue
		}
		env = append(env, kv)
	}
	// A race-enabled binary sleeps 1 s at exit by default so that late goroutines can still
	// report; the daemon joins all of its goroutines before it exits, and the SIGTERM tests
	// measure its exit time.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	env = append(env,
		"GORACE="+gorace,
		daemonEnv+"=1",
		"CODEX_HOME="+e.codexHome,
		"CODEX_CHANNEL_MOLECULE_STATE_DIR="+e.stateDir,
		"CONFIGS_DIR="+filepath.Join(e.root, "no-configs"),
	)
	if n := testThreadsPerChild(); n != "" {
		// The suite run with shared children (make test-shared); a test's own setting wins.
		env = append(env, "CODEX_WARM_THREADS_PER_CHILD="+n)
	}
	switch {
	case e.plat != nil && e.canonical:
		env = append(env,
			"MOLECULE_API_URL="+e.plat.URL(),
			"MOLECULE_WORKSPACE_ID="+e.plat.WorkspaceID(),
			"MOLECULE_WORKSPACE_TOKEN="+e.plat.Token(),
		)
	case e.plat != nil:
		env = append(env,
			"PLATFORM_URL="+e.plat.URL(),
			"WORKSPACE_ID="+e.plat.WorkspaceID(),
			"MOLECULE_WORKSPACE_TOKEN="+e.plat.Token(),
		)
	}
	return append(env, e.extraEnv...)
}

// daemonProc is one started daemon process.
type daemonProc struct {
	e       *e2e
	n       int
	cmd     *exec.Cmd
	pid     int
	logPath string
	exited  chan struct{} // closed once the process was reaped; waitErr is valid then
	waitErr error
	ready   StatusDoc // the first status the daemon answered
	nsPID   int       // the daemon's pid in its own PID namespace (asPID1); 0: d.pid
}

// start starts a daemon on the environment's state directory and waits until its control
// socket answers. extra flags come after the defaults and override them.
func (e *e2e) start(extra ...string) *daemonProc {
	e.t.Helper()
	d := e.launch(extra...)
	d.waitReady()
	return d
}

// launch starts a daemon like start, without waiting for it to be ready.
func (e *e2e) launch(extra ...string) *daemonProc {
	e.t.Helper()
	n := len(e.daemons) + 1
	logPath := filepath.Join(e.root, fmt.Sprintf("daemon-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	args := []string{"run",
		"--state-dir", e.stateDir, "--codex-bin", e.codexBin, "--cwd", e.workDir,
		// The safety poll as fast as the interval: the suite's waits count polls, whether the
		// event stream is up or not. The real-time tests set both as in production.
		"--poll-interval", pollInterval, "--safety-poll-interval", pollInterval,
		"--drain-timeout", "5s", "--max-children", "8",
		"--log-level", "info", "--log-format", "json"}
	switch {
	case e.local:
		args = append(args, "--inbox", "local", "--listen", "127.0.0.1:0")
	case !e.canonical:
		args = append(args, "--inbox", "molecule")
	}
	args = append(args, extra...)
	bin := os.Args[0]
	if e.bin != "" {
		bin = e.bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = e.env()
	cmd.Dir = e.workDir
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, as under a service manager: signals from the test reach only it.
	// Pdeathsig: a test binary that dies (timeout panic) takes its daemons along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if e.procAttr != nil {
		e.procAttr(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start daemon: %v", err)
	}
	d := &daemonProc{e: e, n: n, cmd: cmd, pid: cmd.Process.Pid, logPath: logPath, exited: make(chan struct{})}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	e.daemons = append(e.daemons, d)
	return d
}

// waitFailed waits (bounded) for a daemon that must not start to exit, and fails the test unless
// it exited non-zero without ever answering on its control socket.
func (d *daemonProc) waitFailed() {
	t := d.e.t
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(readyTimeout):
		_ = syscall.Kill(d.pid, syscall.SIGKILL)
		<-d.exited
		t.Fatalf("daemon %d still ran %s after a start that must fail; killed. log:\n%s", d.n, readyTimeout, d.logTail(4000))
	}
	if d.waitErr == nil {
		t.Fatalf("daemon %d exited 0, want a failed start; log:\n%s", d.n, d.logTail(4000))
	}
}

// waitReady polls the control socket until this daemon (by pid) answers.
func (d *daemonProc) waitReady() {
	t := d.e.t
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		doc, err := fetchStatus(ctx, d.e.stateDir)
		cancel()
		if err == nil && doc.Daemon.PID == d.pid && (!d.e.local || doc.Daemon.Listen != "") {
			d.ready = doc
			return
		}
		select {
		case <-d.exited:
			t.Fatalf("daemon %d exited before it was ready (%v); log:\n%s", d.n, d.waitErr, d.logTail(4000))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon %d not ready after %s (last status error: %v); log:\n%s", d.n, readyTimeout, err, d.logTail(4000))
		}
	}
}

func (d *daemonProc) hasExited() bool {
	select {
	case <-d.exited:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to bound for the exit. It fails the test unless the daemon
// exits 0 in time with a clean log, and returns how long the exit took.
func (d *daemonProc) stop(bound time.Duration) time.Duration {
	d.e.t.Helper()
	start := time.Now()
	d.signal(syscall.SIGTERM)
	d.waitExit(bound)
	return time.Since(start)
}

// signal sends sig to the daemon process.
func (d *daemonProc) signal(sig syscall.Signal) {
	d.e.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil && !d.hasExited() {
		d.e.t.Fatalf("signal %v to daemon %d: %v", sig, d.n, err)
	}
}

// waitExit waits up to bound for the daemon to exit (SIGKILL and fail after that), then fails
// the test unless it exited 0 with a clean log.
func (d *daemonProc) waitExit(bound time.Duration) {
	t := d.e.t
	t.Helper()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-d.exited:
	case <-timer.C:
		_ = syscall.Kill(d.pid, syscall.SIGKILL)
		<-d.exited
		t.Fatalf("daemon %d did not exit within %s; killed. log:\n%s", d.n, bound, d.logTail(4000))
	}
	if d.waitErr != nil {
		t.Errorf("daemon %d exit: %v, want exit status 0; log:\n%s", d.n, d.waitErr, d.logTail(4000))
	}
	d.checkLog()
}

// kill SIGKILLs the daemon process alone (not its codex children, which have process groups of
// their own): a crash as the kernel's OOM killer or `kill -9` would cause it.
func (d *daemonProc) kill() {
	t := d.e.t
	t.Helper()
	if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil && !d.hasExited() {
		t.Fatalf("SIGKILL daemon %d: %v", d.n, err)
	}
	select {
	case <-d.exited:
	case <-time.After(stopTimeout):
		t.Fatalf("daemon %d not reaped %s after SIGKILL", d.n, stopTimeout)
	}
	d.checkLogCut(true)
}

// checkLog fails the test when the daemon's log shows a data race, a line that is not JSON (a
// panic or runtime error: zap writes only JSON lines), or the workspace token.
func (d *daemonProc) checkLog() { d.checkLogCut(false) }

// checkLogCut is checkLog; killed says the daemon was SIGKILLed, which may cut its last line
// short (a write to a file stops at a fatal signal): a last line without its newline is then
// not judged.
func (d *daemonProc) checkLogCut(killed bool) {
	t := d.e.t
	t.Helper()
	raw := d.log()
	if strings.Contains(raw, "DATA RACE") {
		t.Errorf("daemon %d log reports a data race:\n%s", d.n, raw)
	}
	if d.e.plat != nil && strings.Contains(raw, d.e.plat.Token()) {
		t.Errorf("daemon %d log contains the workspace token", d.n)
	}
	lines := raw
	if i := strings.LastIndexByte(lines, '\n'); killed && i < len(lines)-1 {
		lines = lines[:i+1]
	}
	sc := bufio.NewScanner(strings.NewReader(lines))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) > 0 && !json.Valid(line) {
			t.Errorf("daemon %d log has a line that is not JSON: %q", d.n, capString(string(line), 400))
			break
		}
	}
}

// cleanup stops every daemon still running and, when the test failed, shows their log tails.
func (e *e2e) cleanup() {
	for _, d := range e.daemons {
		if !d.hasExited() {
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(stopTimeout):
				_ = syscall.Kill(d.pid, syscall.SIGKILL)
				<-d.exited
				e.t.Errorf("daemon %d ignored SIGTERM at cleanup; killed", d.n)
			}
		}
		if e.t.Failed() {
			e.t.Logf("daemon %d log tail (%s):\n%s", d.n, d.logPath, d.logTail(6000))
		}
	}
}

func (d *daemonProc) log() string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		d.e.t.Fatalf("read daemon log: %v", err)
	}
	return string(b)
}

func (d *daemonProc) logTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// logEntry is one JSON log line.
type logEntry map[string]any

func (l logEntry) str(k string) string {
	s, _ := l[k].(string)
	return s
}

// logEntries parses the daemon's log; lines that are not JSON are skipped (checkLog reports them).
func (d *daemonProc) logEntries() []logEntry {
	var out []logEntry
	sc := bufio.NewScanner(strings.NewReader(d.log()))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e logEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// logsWith returns the entries whose message contains msg.
func (d *daemonProc) logsWith(msg string) []logEntry {
	var out []logEntry
	for _, e := range d.logEntries() {
		if strings.Contains(e.str("msg"), msg) {
			out = append(out, e)
		}
	}
	return out
}

// waitCtx is a context that ends at the wait deadline or when the daemon exits, so a daemon that
// crashes fails the wait at once instead of after the timeout.
func (d *daemonProc) waitCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-d.exited:
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, func() { cancel(); wg.Wait() }
}

// waitPlatform blocks until cond (over the fake platform's records) holds.
func (d *daemonProc) waitPlatform(what string, cond func() bool) {
	t := d.e.t
	t.Helper()
	ctx, cancel := d.waitCtx()
	defer cancel()
	if err := d.e.plat.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v (daemon exited: %v)\nplatform calls: %s\ndaemon log:\n%s",
			what, err, d.hasExited(), d.e.callSummary(), d.logTail(4000))
	}
}

// waitRequests blocks until the mock model received at least n requests.
func (d *daemonProc) waitRequests(n int) {
	t := d.e.t
	t.Helper()
	ctx, cancel := d.waitCtx()
	defer cancel()
	if err := d.e.mock.WaitRequests(ctx, n); err != nil {
		t.Fatalf("waiting for %d model requests (have %d): %v\ndaemon log:\n%s", n, d.e.mock.RequestCount(), err, d.logTail(4000))
	}
}

// waitHung blocks until at least n model streams hang.
func (d *daemonProc) waitHung(n int) {
	t := d.e.t
	t.Helper()
	ctx, cancel := d.waitCtx()
	defer cancel()
	if err := d.e.mock.WaitHung(ctx, n); err != nil {
		t.Fatalf("waiting for %d hung model streams: %v\ndaemon log:\n%s", n, err, d.logTail(4000))
	}
}

// waitUntil polls cond (for state only reachable by reading: the status socket, state files,
// the log) every 20 ms until it holds or the wait deadline passes.
func (d *daemonProc) waitUntil(what string, cond func() bool) {
	t := d.e.t
	t.Helper()
	ctx, cancel := d.waitCtx()
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (daemon exited: %v)\ndaemon log:\n%s", what, ctx.Err(), d.hasExited(), d.logTail(4000))
		case <-tick.C:
		}
	}
}

// waitPolls waits until the daemon made n more activity polls than now: proof that it had the
// chance to act on everything the platform holds (and did not).
func (d *daemonProc) waitPolls(n int) {
	d.e.t.Helper()
	base := d.e.plat.CountCalls(moleculetest.RouteActivity, 0)
	d.waitPlatform(fmt.Sprintf("%d more activity polls", n), func() bool {
		return d.e.plat.CountCalls(moleculetest.RouteActivity, 0) >= base+n
	})
}

// status asks the daemon's control socket for its status.
func (d *daemonProc) status() StatusDoc {
	d.e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	doc, err := fetchStatus(ctx, d.e.stateDir)
	if err != nil {
		d.e.t.Fatalf("status of daemon %d: %v", d.n, err)
	}
	if want := d.pidInside(); doc.Daemon.PID != want {
		d.e.t.Fatalf("status answered by pid %d, want daemon %d (pid %d)", doc.Daemon.PID, d.n, want)
	}
	return doc
}

// pidInside is the daemon's pid as it sees it: another than d.pid in a PID namespace of its own.
func (d *daemonProc) pidInside() int {
	if d.nsPID != 0 {
		return d.nsPID
	}
	return d.pid
}

// bridgeStats decodes the Molecule inbox's counters from a status document.
func (d *daemonProc) bridgeStats() molecule.Stats {
	d.e.t.Helper()
	doc := d.status()
	var s molecule.Stats
	b, err := json.Marshal(doc.Bridge)
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil || doc.Bridge == nil {
		d.e.t.Fatalf("status has no bridge stats (%v): %+v", err, doc.Bridge)
	}
	return s
}

func (e *e2e) callSummary() string {
	var b strings.Builder
	for _, c := range e.plat.Calls() {
		fmt.Fprintf(&b, "\n  %s %s?%s -> %d", c.Method, c.Path, c.Query.Encode(), c.Status)
	}
	return b.String()
}

// bridgeStateFile is the part of bridge-state.json the tests read.
type bridgeStateFile struct {
	Cursor   string   `json:"cursor"`
	AckedSeq int64    `json:"acked_seq"`
	Done     []string `json:"done"`
	Pending  []struct {
		ActivityID string `json:"activity_id"`
		Text       string `json:"text"`
	} `json:"pending"`
}

func (p bridgeStateFile) pending(id string) bool {
	for _, r := range p.Pending {
		if r.ActivityID == id {
			return true
		}
	}
	return false
}

func (e *e2e) bridgeState() bridgeStateFile {
	e.t.Helper()
	var st bridgeStateFile
	b, err := os.ReadFile(filepath.Join(e.stateDir, molecule.StateFileName))
	if errors.Is(err, os.ErrNotExist) {
		return st
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		e.t.Fatalf("bridge state file: %v\n%s", err, b)
	}
	return st
}

// sessionsFile reads sessions.json as the Python daemon would: a flat JSON object.
func (e *e2e) sessionsFile() map[string]string {
	e.t.Helper()
	m := map[string]string{}
	b, err := os.ReadFile(filepath.Join(e.stateDir, sessions.DefaultFileName))
	if errors.Is(err, os.ErrNotExist) {
		return m
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		e.t.Fatalf("sessions.json is not a flat object of strings: %v\n%s", err, b)
	}
	return m
}

// canvasKey is the chat key of the workspace's canvas user.
func (e *e2e) canvasKey() string { return "canvas:" + e.plat.WorkspaceID() }

// notifyTexts returns the texts of the accepted notifies, in order.
func (e *e2e) notifyTexts() []string {
	var out []string
	for _, n := range e.plat.Notifies() {
		out = append(out, n.Message)
	}
	return out
}

// countReplies counts the delivered replies (notifies and A2A sends) equal to text.
func (e *e2e) countReplies(text string) int {
	n := 0
	for _, m := range e.plat.Notifies() {
		if m.Message == text {
			n++
		}
	}
	for _, s := range e.plat.A2ASends() {
		if s.Text == text {
			n++
		}
	}
	return n
}

// requestsFor returns the model requests whose last user text is text (tool follow-ups
// excluded): how many times codex ran a turn for that message.
func (e *e2e) requestsFor(text string) []mockmodel.Request {
	var out []mockmodel.Request
	for _, r := range e.mock.Requests() {
		if r.LastUserText == text && !r.HasToolOutput {
			out = append(out, r)
		}
	}
	return out
}

// chatChildren returns the status rows of children serving a chat: spares (--spares, on by
// default) belong to none.
func chatChildren(doc StatusDoc) []supervisor.ChildStatus {
	var out []supervisor.ChildStatus
	for _, c := range doc.Snapshot.Children {
		if c.ChatKey != "" {
			out = append(out, c)
		}
	}
	return out
}

// childPID returns the pid of the live child serving chatKey in doc, or 0.
func childPID(doc StatusDoc, chatKey string) int {
	for _, c := range doc.Snapshot.Children {
		if c.ChatKey == chatKey {
			return c.PID
		}
	}
	return 0
}

// proc identifies a process across pid reuse: its pid and its start time from /proc.
type proc struct {
	pid   int
	start uint64
}

// procOf reads pid's identity; the process must be running.
func procOf(t *testing.T, pid int) proc {
	t.Helper()
	start, state, err := procStat(pid)
	if err != nil || state == 'Z' {
		t.Fatalf("pid %d is not a running process (state %q, %v)", pid, state, err)
	}
	return proc{pid: pid, start: start}
}

// gone reports whether the process no longer runs: kill(pid, 0) fails with ESRCH, or the pid now
// belongs to another process, or it is a zombie (dead; reaping it is init's job once its parent
// died, and some container inits are slow at that).
func (p proc) gone() bool {
	if err := syscall.Kill(p.pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	start, state, err := procStat(p.pid)
	return err != nil || start != p.start || state == 'Z'
}

// waitGone waits (bounded) until every process in ps is gone.
func waitGone(t *testing.T, bound time.Duration, ps ...proc) {
	t.Helper()
	// A process that is not our child has no event to wait on: poll /proc.
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for _, p := range ps {
		for !p.gone() {
			select {
			case <-deadline.C:
				t.Fatalf("codex pid %d still running %s later: an orphan", p.pid, bound)
			case <-tick.C:
			}
		}
	}
}

// procStat returns the start time and the state of pid, read by the project's /proc reader.
func procStat(pid int) (start uint64, state byte, err error) {
	start, state, _, err = procStatSession(pid)
	return start, state, err
}

// procStatSession is procStat plus the process's session id.
func procStatSession(pid int) (start uint64, state byte, session int, err error) {
	st, err := childproc.ProcFS{}.Stat(pid)
	return st.StartTime, st.State, st.Session, err
}

// gate makes a Script hold chosen model requests until it opens: when want requests are held at
// the same time, or on release. A holder gives up after a safety timeout, which the test then
// reports.
type gate struct {
	mu      sync.Mutex
	held    int // holding now
	maxHeld int // most ever held at once
	want    int // open once this many are held at once (0: only release opens it)
	open    chan struct{}
	once    sync.Once
	expired chan struct{} // closed when a holder hit the safety timeout
	exOnce  sync.Once
}

// newGate returns a gate that opens by itself once want requests are held at once (0: only
// release opens it). A test creates it before newE2E (the Script refers to it) and registers
// t.Cleanup(g.release) after newE2E, so held requests are let go before the mock closes.
func newGate(want int) *gate {
	return &gate{want: want, open: make(chan struct{}), expired: make(chan struct{})}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// hold blocks the calling model request until the gate opens; false means the safety timeout
// passed first.
func (g *gate) hold(timeout time.Duration) bool {
	g.mu.Lock()
	g.held++
	g.maxHeld = max(g.maxHeld, g.held)
	if g.want > 0 && g.held == g.want {
		g.release()
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-g.open:
		return true
	case <-timer.C:
		g.exOnce.Do(func() { close(g.expired) })
		return false
	}
}

func (g *gate) timedOut() bool {
	select {
	case <-g.expired:
		return true
	default:
		return false
	}
}

// most is the largest number of requests that were held at the same time.
func (g *gate) most() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxHeld
}

// firstTime returns a function that reports true the first time it is called for a text and
// false afterwards: a Script uses it to misbehave once (hang, block) and answer normally when
// the message comes again after a restart.
func firstTime() func(text string) bool {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(text string) bool {
		mu.Lock()
		defer mu.Unlock()
		if seen[text] {
			return false
		}
		seen[text] = true
		return true
	}
}

func capString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
