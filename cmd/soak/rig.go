package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// workspaceID is the workspace the daemon runs as on the fake platform.
const workspaceID = "ws-soak"

// readyTimeout bounds a daemon start until its control socket answers with its pid.
const readyTimeout = 30 * time.Second

// rig is one soak run's environment: a temp dir, the mock model, the fake platform, and the
// daemon processes. Daemons are started and killed by one goroutine at a time: the main
// goroutine before and after the chaos phase, the chaos goroutine during it.
type rig struct {
	cfg   Config
	out   io.Writer
	start time.Time

	root, codexHome, stateDir, workDir string

	mock   *mockmodel.Model
	plat   *moleculetest.Platform
	faults *modelFaults
	dcfg   harness.DaemonConfig
	status harness.StatusClient
	match  procMatcher

	daemons    []*daemonProc
	startMarks []int // call-log length just before each daemon start
	kills      []Kill
	childKills int
	unexpected []string // daemon exits the harness did not cause

	msgMu   sync.Mutex
	msgs    []Message
	perChat map[string]int // chat key → messages injected
	seq     int64
}

// newRig creates the temp dir, the mock model (with the fault script) and the platform.
// Close undoes it.
func newRig(cfg Config, out io.Writer) (*rig, error) {
	if err := becomeSubreaper(); err != nil {
		return nil, err
	}
	codexExe, err := resolveExe(cfg.CodexBin)
	if err != nil {
		return nil, fmt.Errorf("codex binary: %w", err)
	}
	supBin, err := filepath.Abs(cfg.SupervisorBin)
	if err != nil {
		return nil, fmt.Errorf("supervisor binary: %w", err)
	}
	if _, err := os.Stat(supBin); err != nil {
		return nil, fmt.Errorf("supervisor binary (make build): %w", err)
	}
	// Not under a long path: the control socket's path must fit in 108 bytes.
	root, err := os.MkdirTemp("", "soak-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	h := &rig{
		cfg:       cfg,
		out:       out,
		start:     time.Now(),
		root:      root,
		codexHome: filepath.Join(root, "codex-home"),
		stateDir:  filepath.Join(root, "state"),
		workDir:   filepath.Join(root, "work"),
		perChat:   make(map[string]int),
	}
	for _, d := range []string{h.stateDir, h.workDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	h.faults = newModelFaults(cfg.Seed, cfg.ModelHangRate, cfg.ModelFailRate)
	h.mock, err = harness.StartModel(mockmodel.Config{Script: h.faults.Script}, h.codexHome)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	// Echoed notifies and a mailbox with acks make the feed look like the real platform's: the
	// daemon must skip its own replies and report acked_seq.
	h.plat = harness.NewPlatform(workspaceID, cfg.Seed)

	h.match = procMatcher{envMarker: []byte("CODEX_HOME=" + h.codexHome), codexBin: codexExe, self: os.Getpid()}
	h.status = harness.StatusClient{Bin: supBin, StateDir: h.stateDir, Env: harness.CleanEnv()}
	h.dcfg = harness.DaemonConfig{
		Bin: supBin,
		Args: []string{"run", "--inbox", "molecule",
			"--state-dir", h.stateDir, "--codex-bin", cfg.CodexBin, "--cwd", h.workDir,
			"--poll-interval", cfg.PollInterval.String(), "--turn-timeout", cfg.TurnTimeout.String(),
			"--idle-ttl", cfg.IdleTTL.String(), "--drain-timeout", cfg.DrainTimeout.String(),
			"--max-children", strconv.Itoa(cfg.MaxChildren), "--spares", strconv.Itoa(cfg.Spares), "--log-format", "json", "--log-level", "info",
			// The fake's peers answer at once: an A2A send that hangs is a platform hang here,
			// not a push peer's long turn, and is given up on like any other hung call.
			"--peer-turn-timeout", "30s"},
		Env: append(append(harness.CleanEnv(),
			"CODEX_HOME="+h.codexHome,
			"CODEX_CHANNEL_MOLECULE_STATE_DIR="+h.stateDir,
			"CONFIGS_DIR="+filepath.Join(root, "no-configs"),
		), harness.PlatformEnv(h.plat)...),
		Dir: h.workDir,
	}
	return h, nil
}

// logf prints a progress line stamped with the time since the start.
func (h *rig) logf(format string, args ...any) {
	fmt.Fprintf(h.out, "[%6.1fs] %s\n", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
}

// current is the newest daemon.
func (h *rig) current() *daemonProc {
	if len(h.daemons) == 0 {
		return nil
	}
	return h.daemons[len(h.daemons)-1]
}

// startDaemon starts the next daemon and waits until its control socket answers with its pid.
func (h *rig) startDaemon(ctx context.Context) error {
	n := len(h.daemons) + 1
	h.startMarks = append(h.startMarks, len(h.plat.Calls()))
	d, err := startDaemon(h.dcfg, n, filepath.Join(h.root, fmt.Sprintf("daemon-%d.log", n)))
	if err != nil {
		return err
	}
	h.daemons = append(h.daemons, d)
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	began := time.Now()
	_, err = d.AwaitReady(rctx, h.status, 100*time.Millisecond, nil)
	if !d.Alive() {
		return fmt.Errorf("daemon %d (pid %d) exited during start (%s); log %s", n, d.PID(), errOrOK(d.ExitErr()), d.logPath)
	}
	if err != nil {
		return fmt.Errorf("daemon %d (pid %d) not ready within %s: %w; log %s", n, d.PID(), readyTimeout, err, d.logPath)
	}
	h.logf("daemon #%d ready: pid %d in %s", n, d.PID(), time.Since(began).Round(time.Millisecond))
	return nil
}

// checkDaemon notices a daemon that exited without being killed, records it and starts the next
// one, so that one crash is reported without hiding everything after it.
func (h *rig) checkDaemon(ctx context.Context) error {
	d := h.current()
	if d == nil || d.Alive() || d.Killed() {
		return nil
	}
	msg := fmt.Sprintf("daemon #%d (pid %d) exited by itself: %v (log %s)", d.n, d.PID(), d.ExitErr(), d.logPath)
	h.unexpected = append(h.unexpected, msg)
	h.logf("%s", msg)
	h.recordKill(time.Now())
	return h.startDaemon(ctx)
}

// killDaemon SIGKILLs the daemon, records the state it left and starts the next one.
func (h *rig) killDaemon(ctx context.Context) error {
	if err := h.checkDaemon(ctx); err != nil {
		return err
	}
	d := h.current()
	at := time.Now()
	if err := d.Kill(ctx); err != nil {
		return err
	}
	k := h.recordKill(at)
	h.logf("daemon kill #%d: pid %d; it left cursor %q, acked_seq %d, %d pending replies, %d sessions",
		len(h.kills), d.PID(), k.State.Cursor, k.State.AckedSeq, len(k.State.Pending), len(k.Sessions))
	return h.startDaemon(ctx)
}

// recordKill snapshots what a dead daemon left on disk. Nothing writes it until the next start.
func (h *rig) recordKill(at time.Time) Kill {
	k := Kill{At: at}
	var err error
	if k.State, err = readBridgeState(h.stateDir); err != nil {
		h.logf("warning: %v", err)
	}
	if k.Sessions, err = readSessions(h.stateDir); err != nil {
		h.logf("warning: %v", err)
	}
	h.kills = append(h.kills, k)
	return k
}

// boundaries sets each kill's Boundary: the call-log index of the next daemon's register call,
// the first call it makes. Calls before it come from the killed daemon or earlier ones, even
// requests the platform finished handling after the kill.
func (h *rig) boundaries(calls []moleculetest.Call) []Kill {
	kills := append([]Kill(nil), h.kills...)
	for i := range kills {
		kills[i].Boundary = len(calls)
		if i+1 >= len(h.startMarks) {
			continue
		}
		for j := h.startMarks[i+1]; j < len(calls); j++ {
			if calls[j].Route == moleculetest.RouteRegister {
				kills[i].Boundary = j
				break
			}
		}
	}
	return kills
}

// messages returns the messages injected so far.
func (h *rig) messages() []Message {
	h.msgMu.Lock()
	defer h.msgMu.Unlock()
	return append([]Message(nil), h.msgs...)
}

// close stops whatever is still running and sweeps processes left behind, also when the soak
// failed half-way. It returns what the sweep found.
func (h *rig) close(ctx context.Context) []proc {
	for _, d := range h.daemons {
		if err := d.Kill(ctx); err != nil {
			h.logf("warning: %v", err)
		}
	}
	h.plat.Close()
	if err := h.mock.Close(); err != nil {
		h.logf("warning: mock model close: %v", err)
	}
	found, err := h.match.sweep(ctx)
	if err != nil {
		h.logf("warning: %v", err)
	}
	// Orphans of killed daemons exited long ago (or were just swept); their zombies are ours.
	if n := reapOrphans(); n > 0 {
		h.logf("reaped %d exited codex processes orphaned by daemon kills", n)
	}
	for _, p := range found {
		h.logf("swept leftover process %s", p)
	}
	return found
}
