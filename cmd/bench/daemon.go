package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Bounds of the daemon's lifecycle as the bench drives it.
const (
	daemonReadyTimeout = 30 * time.Second
	daemonPollEvery    = 100 * time.Millisecond
	daemonStopTimeout  = 45 * time.Second // above the daemon's default 30 s drain
	daemonPostTimeout  = 2 * time.Minute
	orphanKillTimeout  = 5 * time.Second
)

// daemonConfig starts one `supervisor run` with the local inbox.
type daemonConfig struct {
	SupervisorBin string
	CodexBin      string
	Side          side
	MaxChildren   int
	Marker        string // NAME=value put in the daemon's environment for the leftover check
}

// daemon is a running `supervisor run --inbox local` subprocess.
type daemon struct {
	cfg      daemonConfig
	stateDir string
	cmd      *exec.Cmd
	stderr   *tailWriter
	waitDone chan struct{} // closed by the waiter goroutine once cmd.Wait returned
	waitErr  error
	wg       sync.WaitGroup // the waiter

	pid     int    // from `supervisor status`
	baseURL string // http://<listen>
	http    *http.Client
}

// statusDoc is the part of `supervisor status --json` the bench reads.
type statusDoc struct {
	Daemon struct {
		PID    int    `json:"pid"`
		Listen string `json:"listen"`
	} `json:"daemon"`
	Snapshot struct {
		Children []struct {
			ChatKey  string `json:"chat_key"`
			ThreadID string `json:"thread_id"`
			PID      int    `json:"pid"`
			State    string `json:"state"`
			RSSBytes int64  `json:"rss_bytes"`
		} `json:"children"`
	} `json:"snapshot"`
}

// localReply is the 200 answer of POST /v1/chats/{chatKey}/messages.
type localReply struct {
	Text       string `json:"text"`
	ChatKey    string `json:"chat_key"`
	ThreadID   string `json:"thread_id"`
	TurnID     string `json:"turn_id"`
	Status     string `json:"status"`
	DurationMS int64  `json:"duration_ms"`
}

// startDaemon launches the daemon with CODEX_HOME and cwd of cfg.Side and returns once
// `supervisor status` reports its pid and listen address.
func startDaemon(ctx context.Context, cfg daemonConfig) (*daemon, error) {
	d := &daemon{
		cfg:      cfg,
		stateDir: filepath.Join(cfg.Side.dir, "state"),
		stderr:   &tailWriter{max: 16 << 10},
		waitDone: make(chan struct{}),
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64, // every chat of the throughput run keeps its connection
			DisableCompression:  true,
		}},
	}
	d.cmd = exec.Command(cfg.SupervisorBin, "run",
		"--inbox", "local",
		"--listen", "127.0.0.1:0",
		"--state-dir", d.stateDir,
		"--codex-bin", cfg.CodexBin,
		"--max-children", strconv.Itoa(cfg.MaxChildren),
		"--log-level", "warn")
	d.cmd.Dir = cfg.Side.cwd
	d.cmd.Env = append(os.Environ(), "CODEX_HOME="+cfg.Side.codexHome, cfg.Marker) // the last duplicate wins
	d.cmd.Stdout = d.stderr
	d.cmd.Stderr = d.stderr
	// Its own group, so that a daemon that ignores SIGTERM can be killed with everything in it;
	// Pdeathsig: a bench killed outright still makes the daemon drain and stop its children.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	d.cmd.WaitDelay = 2 * time.Second
	if _, err := os.Stat(cfg.SupervisorBin); err != nil {
		return nil, fmt.Errorf("daemon binary: %w (run `make build`, or pass --supervisor-bin)", err)
	}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start daemon %s: %w", cfg.SupervisorBin, err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.waitErr = d.cmd.Wait()
		close(d.waitDone)
	}()
	if err := d.awaitReady(ctx); err != nil {
		return nil, joinClose(err, d.stop())
	}
	return d, nil
}

// awaitReady polls `supervisor status --json` until it answers with a listen address.
func (d *daemon) awaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, daemonReadyTimeout)
	defer cancel()
	tick := time.NewTicker(daemonPollEvery)
	defer tick.Stop()
	var lastErr error
	for {
		doc, err := d.status(ctx)
		if err == nil && doc.Daemon.Listen != "" && doc.Daemon.PID > 0 {
			d.pid = doc.Daemon.PID
			d.baseURL = "http://" + doc.Daemon.Listen
			return nil
		}
		if err == nil {
			err = errors.New("status has no listen address or pid yet")
		}
		lastErr = err
		select {
		case <-d.waitDone:
			return fmt.Errorf("daemon exited before it was ready (%v); output tail:\n%s", d.waitErr, d.stderr.String())
		case <-ctx.Done():
			return fmt.Errorf("daemon not ready within %s: %w (last status error: %v); output tail:\n%s",
				daemonReadyTimeout, context.Cause(ctx), lastErr, d.stderr.String())
		case <-tick.C:
		}
	}
}

// status runs `supervisor status --json` against the daemon's state directory.
func (d *daemon) status(ctx context.Context) (statusDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.cfg.SupervisorBin, "status", "--json", "--state-dir", d.stateDir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return statusDoc{}, fmt.Errorf("supervisor status: %w: %s", err, bytes.TrimSpace(errOut.Bytes()))
	}
	var doc statusDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		return statusDoc{}, fmt.Errorf("supervisor status: decode: %w", err)
	}
	return doc, nil
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
	return reply, wall, nil
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
		tree = descendants(procs, d.cmd.Process.Pid)
	}
	var errs []error
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, fmt.Errorf("stop daemon: SIGTERM: %w", err))
	}
	timer := time.NewTimer(daemonStopTimeout)
	defer timer.Stop()
	select {
	case <-d.waitDone:
	case <-timer.C:
		errs = append(errs, fmt.Errorf("stop daemon: still running %s after SIGTERM; killed", daemonStopTimeout))
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.waitDone
	}
	d.wg.Wait()
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
