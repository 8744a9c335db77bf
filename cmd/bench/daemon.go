package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
)

// Bounds of the daemon's lifecycle as the bench drives it.
const (
	daemonReadyTimeout = 30 * time.Second
	daemonPollEvery    = 100 * time.Millisecond
	daemonStopTimeout  = 45 * time.Second // above the daemon's default 30 s drain
	daemonPostTimeout  = 2 * time.Minute
	orphanKillTimeout  = 5 * time.Second
)

// daemonConfig starts one `supervisor run`, with the local inbox unless Platform is set.
type daemonConfig struct {
	SupervisorBin string
	CodexBin      string
	Side          side
	MaxChildren   int
	// ThreadsPerChild, when above 0, is passed as --threads-per-child (shared children).
	ThreadsPerChild int
	// Spares, when not nil, is passed as --spares: spare children the daemon keeps ready for new
	// chats. Nil leaves the flag out, for the daemon's default (and for a daemon without the flag).
	Spares *int
	// Platform, when set, makes the daemon poll this fake Molecule platform (--inbox molecule,
	// the platform's environment) instead of opening the local inbox.
	Platform *moleculetest.Platform
	// PollInterval is the Molecule poll interval (0: the daemon's default).
	PollInterval time.Duration
	// Extra are further flags of `supervisor run`.
	Extra  []string
	Marker string // NAME=value put in the daemon's environment for the leftover check
}

// stateDir is the daemon's state directory (control socket, sessions, inbox position).
func (cfg daemonConfig) stateDir() string { return filepath.Join(cfg.Side.dir, "state") }

// args are the arguments of `supervisor run` for cfg.
func (cfg daemonConfig) args() []string {
	args := []string{"run"}
	if cfg.Platform != nil {
		args = append(args, "--inbox", "molecule")
		if cfg.PollInterval > 0 {
			args = append(args, "--poll-interval", cfg.PollInterval.String())
		}
	} else {
		args = append(args, "--inbox", "local", "--listen", "127.0.0.1:0")
	}
	args = append(args,
		"--state-dir", cfg.stateDir(),
		"--codex-bin", cfg.CodexBin,
		"--max-children", strconv.Itoa(cfg.MaxChildren))
	if cfg.Spares != nil {
		args = append(args, "--spares", strconv.Itoa(*cfg.Spares))
	}
	if cfg.ThreadsPerChild > 0 {
		args = append(args, "--threads-per-child", strconv.Itoa(cfg.ThreadsPerChild))
	}
	args = append(args, cfg.Extra...)
	return append(args, "--log-level", "warn")
}

// env is the daemon's environment: base (the bench's own) with the side's CODEX_HOME, the
// leftover marker, and for the Molecule inbox the platform's settings, with anything in base
// that would configure the platform or the daemon behind the bench's back left out.
func (cfg daemonConfig) env(base []string) []string {
	env := slices.Clone(base)
	if cfg.Platform != nil {
		env = slices.DeleteFunc(env, func(kv string) bool {
			k, _, _ := strings.Cut(kv, "=")
			return k == "PLATFORM_URL" || k == "WORKSPACE_ID" || k == "CONFIGS_DIR" ||
				k == "CODEX_CHANNEL_MOLECULE_STATE_DIR" || strings.HasPrefix(k, "MOLECULE_") || strings.HasPrefix(k, "CODEX_WARM_")
		})
		env = append(env, harness.PlatformEnv(cfg.Platform)...)
		// No token file may stand in for the platform's token.
		env = append(env, "CONFIGS_DIR="+filepath.Join(cfg.Side.dir, "no-configs"))
	}
	return append(env, "CODEX_HOME="+cfg.Side.codexHome, cfg.Marker) // the last duplicate wins
}

// daemon is a running `supervisor run` subprocess.
type daemon struct {
	proc   *harness.Daemon
	status harness.StatusClient
	stderr *tailWriter

	pid     int    // from `supervisor status`
	baseURL string // http://<listen>; local inbox only
	http    *http.Client
}

// localReply is the 200 answer of POST /v1/chats/{chatKey}/messages.
type localReply struct {
	Text       string `json:"text"`
	ChatKey    string `json:"chat_key"`
	ThreadID   string `json:"thread_id"`
	TurnID     string `json:"turn_id"`
	Status     string `json:"status"`
	DurationMS int64  `json:"duration_ms"`
	// TurnMS is the turn's duration to the microsecond, from the answer's Server-Timing
	// header (from an older daemon without it: duration_ms + 0.5).
	TurnMS float64 `json:"-"`
}

// startDaemon launches the daemon with CODEX_HOME and cwd of cfg.Side and returns once
// `supervisor status` reports its pid and its inbox (the local listen address, or the platform).
func startDaemon(ctx context.Context, cfg daemonConfig) (*daemon, error) {
	if _, err := os.Stat(cfg.SupervisorBin); err != nil {
		return nil, fmt.Errorf("daemon binary: %w (run `make build`, or pass --supervisor-bin)", err)
	}
	stateDir := cfg.stateDir()
	out := &tailWriter{max: 16 << 10}
	proc, err := harness.StartDaemon(harness.DaemonConfig{
		Bin:    cfg.SupervisorBin,
		Args:   cfg.args(),
		Env:    cfg.env(os.Environ()),
		Dir:    cfg.Side.cwd,
		Output: out,
		// A bench killed outright still makes the daemon drain and stop its children.
		Pdeathsig: syscall.SIGTERM,
		WaitDelay: 2 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	d := &daemon{
		proc:   proc,
		status: harness.StatusClient{Bin: cfg.SupervisorBin, StateDir: stateDir},
		stderr: out,
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64, // every chat of the throughput run keeps its connection
			DisableCompression:  true,
		}},
	}
	rctx, cancel := context.WithTimeout(ctx, daemonReadyTimeout)
	defer cancel()
	doc, err := proc.AwaitReady(rctx, d.status, daemonPollEvery, func(doc harness.StatusDoc) bool { return doc.Daemon.Listen != "" })
	switch {
	case !proc.Alive():
		return nil, joinClose(fmt.Errorf("daemon exited before it was ready (%v); output tail:\n%s", proc.ExitErr(), out.String()), d.stop())
	case err != nil:
		return nil, joinClose(fmt.Errorf("daemon not ready within %s: %w; output tail:\n%s", daemonReadyTimeout, err, out.String()), d.stop())
	}
	d.pid = doc.Daemon.PID
	if cfg.Platform == nil {
		d.baseURL = "http://" + doc.Daemon.Listen
	}
	return d, nil
}

// post sends one message through the local inbox and waits for the reply. wall is the whole HTTP
// exchange as the client sees it.
func (d *daemon) post(ctx context.Context, chatKey, text string) (reply localReply, wall time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, daemonPostTimeout)
	defer cancel()
	body, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		return localReply{}, 0, err
	}
	u := d.baseURL + "/v1/chats/" + url.PathEscape(chatKey) + "/messages"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return localReply{}, 0, fmt.Errorf("daemon post: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := d.http.Do(req)
	if err != nil {
		return localReply{}, 0, fmt.Errorf("daemon post to %s: %w", chatKey, err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	wall = time.Since(start)
	if err != nil {
		return localReply{}, 0, fmt.Errorf("daemon post to %s: read answer: %w", chatKey, err)
	}
	if resp.StatusCode != http.StatusOK {
		return localReply{}, 0, fmt.Errorf("daemon post to %s: %s: %s", chatKey, resp.Status, truncate(string(b), 300))
	}
	if err := json.Unmarshal(b, &reply); err != nil {
		return localReply{}, 0, fmt.Errorf("daemon post to %s: decode answer: %w", chatKey, err)
	}
	if err := checkReply(reply.Text, text); err != nil {
		return localReply{}, 0, fmt.Errorf("daemon post to %s: %w", chatKey, err)
	}
	reply.TurnMS = serverTimingMS(resp.Header.Get("Server-Timing"), "turn")
	if math.IsNaN(reply.TurnMS) {
		// A daemon from before Server-Timing: duration_ms is truncated to whole milliseconds,
		// half a millisecond short on average.
		reply.TurnMS = float64(reply.DurationMS) + 0.5
	}
	return reply, wall, nil
}

// serverTimingMS is the duration of the metric name in a Server-Timing header value
// ("turn;dur=41.237, daemon;dur=41.902"), or NaN.
func serverTimingMS(header, name string) float64 {
	for m := range strings.SplitSeq(header, ",") {
		parts := strings.Split(strings.TrimSpace(m), ";")
		if parts[0] != name {
			continue
		}
		for _, p := range parts[1:] {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					return f
				}
			}
		}
	}
	return math.NaN()
}

// treeCPU is the CPU used so far by the daemon and all its descendants (its codex children).
func (d *daemon) treeCPU(tick time.Duration) (time.Duration, error) {
	return treeCPU(d.pid, tick)
}

// stop sends SIGTERM and waits for the daemon to drain and exit; past daemonStopTimeout it kills
// the daemon's process group. Codex children run in process groups of their own, so any that
// outlived the daemon are then killed one by one (identified by pid and start time, recorded
// before the stop so a reused pid is never hit).
func (d *daemon) stop() error {
	defer d.http.CloseIdleConnections()
	var tree []procStat
	if procs, err := allProcs(); err == nil {
		tree = descendants(procs, d.proc.PID())
	}
	var errs []error
	// The daemon's exit status is not the bench's business; only a daemon that would not stop is.
	if _, err := d.proc.Terminate(context.Background(), daemonStopTimeout); err != nil && d.proc.Alive() {
		errs = append(errs, fmt.Errorf("stop daemon: %w; killed", err))
		if err := d.proc.Kill(context.Background()); err != nil {
			errs = append(errs, fmt.Errorf("stop daemon: %w", err))
		}
	}
	if n := killSurvivors(tree); n > 0 {
		errs = append(errs, fmt.Errorf("stop daemon: %d of its descendants outlived it and were killed", n))
	}
	return errors.Join(errs...)
}

// killSurvivors SIGKILLs every process of tree that still runs as the same process (same pid and
// start time), waits up to orphanKillTimeout for them to go, and returns how many it found.
func killSurvivors(tree []procStat) int {
	alive := func(p procStat) bool {
		st, err := readProcStat(p.PID)
		return err == nil && st.StartTime == p.StartTime && st.State != 'Z'
	}
	var survivors []procStat
	for _, p := range tree {
		if alive(p) {
			survivors = append(survivors, p)
			if p.PGRP == p.PID {
				_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			}
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(orphanKillTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, p := range survivors {
		for alive(p) && time.Now().Before(deadline) {
			<-tick.C
		}
	}
	return len(survivors)
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
