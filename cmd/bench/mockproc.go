package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// mockWorkerCmd is the hidden subcommand that serves a mock model in a process of its own. Codex
// talks to the model over loopback either way; out of process, the model's work does not share
// the bench's Go runtime with the client side being measured (the bare appserver client, or the
// HTTP client of the daemon), which would favour whichever side runs in the bench process.
const mockWorkerCmd = "mock-worker"

// Bounds of the mock subprocess's control exchanges.
const (
	mockStartTimeout = 15 * time.Second
	mockReplyTimeout = 10 * time.Second
	mockStopTimeout  = 10 * time.Second
)

// mockProc is a mock model running in a subprocess. Its control protocol is line based on the
// child's stdin/stdout: the child first prints "ready <url>"; "home <dir>" makes it write a
// CODEX_HOME for that directory and answer "ok" or "error <text>"; "peak" makes it answer
// "peak <n>", the most model requests it answered at once since the last "peak" (or its start),
// and start a new mark; "timeline" makes it answer "timeline <json>", its timeline so far
// (mockmodel.Event, one JSON array); stdin EOF stops it.
type mockProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *os.File
	lines  *bufio.Reader
	url    string
}

// startMockProc starts the mock subprocess with a per-response latency, on path p (its CA, with
// TLS, written to caFile).
func startMockProc(latency time.Duration, p netPath, caFile, marker string, stderr io.Writer) (*mockProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("mock model process: %w", err)
	}
	cmd := exec.Command(self, mockWorkerCmd, "--latency", latency.String(), "--rtt", p.RTT.String(),
		"--tls="+strconv.FormatBool(p.TLS), "--http-only="+strconv.FormatBool(p.HTTPOnly), "--ca-file", caFile)
	cmd.Env = append(os.Environ(), marker)
	cmd.Stderr = stderr
	// Pdeathsig: a bench killed outright takes its model server with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("mock model process: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("mock model process: %w", err)
	}
	cmd.Stdout = outW
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("mock model process: %w", err)
	}
	outW.Close()
	m := &mockProc{cmd: cmd, stdin: stdin, stdout: outR, lines: bufio.NewReader(outR)}
	line, err := m.readLine(mockStartTimeout)
	if err == nil {
		var ok bool
		if m.url, ok = strings.CutPrefix(line, "ready "); !ok {
			err = fmt.Errorf("unexpected first line %q", line)
		}
	}
	if err != nil {
		return nil, joinClose(fmt.Errorf("mock model process: %w", err), m.Close())
	}
	return m, nil
}

// readLine reads one control line within d. The pipe is non-blocking in Go's poller, so a read
// deadline bounds it without a helper goroutine.
func (m *mockProc) readLine(d time.Duration) (string, error) {
	if err := m.stdout.SetReadDeadline(time.Now().Add(d)); err != nil {
		return "", err
	}
	line, err := m.lines.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read control line: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// WriteCodexHome has the mock write dir/config.toml pointing codex at it.
func (m *mockProc) WriteCodexHome(dir string) error {
	if strings.ContainsAny(dir, "\n") {
		return fmt.Errorf("mock model process: directory name %q has a newline", dir)
	}
	if _, err := fmt.Fprintf(m.stdin, "home %s\n", dir); err != nil {
		return fmt.Errorf("mock model process: %w", err)
	}
	line, err := m.readLine(mockReplyTimeout)
	if err != nil {
		return fmt.Errorf("mock model process: %w", err)
	}
	if line != "ok" {
		return fmt.Errorf("mock model process: %s", line)
	}
	return nil
}

// TakeMaxInFlight asks the mock for its in-flight high-water mark and resets it.
func (m *mockProc) TakeMaxInFlight() (int, error) {
	if _, err := fmt.Fprintln(m.stdin, "peak"); err != nil {
		return 0, fmt.Errorf("mock model process: %w", err)
	}
	line, err := m.readLine(mockReplyTimeout)
	if err != nil {
		return 0, fmt.Errorf("mock model process: %w", err)
	}
	v, ok := strings.CutPrefix(line, "peak ")
	n, convErr := strconv.Atoi(v)
	if !ok || convErr != nil {
		return 0, fmt.Errorf("mock model process: unexpected answer %q to peak", line)
	}
	return n, nil
}

// Steps asks the mock for its timeline.
func (m *mockProc) Steps() ([]mockmodel.Event, error) {
	if _, err := fmt.Fprintln(m.stdin, "timeline"); err != nil {
		return nil, fmt.Errorf("mock model process: %w", err)
	}
	line, err := m.readLine(mockReplyTimeout)
	if err != nil {
		return nil, fmt.Errorf("mock model process: %w", err)
	}
	v, ok := strings.CutPrefix(line, "timeline ")
	var events []mockmodel.Event
	if !ok {
		return nil, fmt.Errorf("mock model process: unexpected answer %q to timeline", truncate(line, 100))
	}
	if err := json.Unmarshal([]byte(v), &events); err != nil {
		return nil, fmt.Errorf("mock model process: timeline: %w", err)
	}
	return events, nil
}

// Close stops the mock (stdin EOF) and reaps it, killing it past mockStopTimeout.
func (m *mockProc) Close() error {
	_ = m.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	timer := time.NewTimer(mockStopTimeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-done:
	case <-timer.C:
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		err = errors.Join(errors.New("mock model process did not stop; killed"), <-done)
	}
	_ = m.stdout.Close()
	if err != nil {
		return fmt.Errorf("mock model process: %w", err)
	}
	return nil
}

// mockWorkerMain is the entry point of the mock subprocess.
func mockWorkerMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(mockWorkerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	latency := fs.Duration("latency", 0, "added before every model response")
	var p netPath
	fs.DurationVar(&p.RTT, "rtt", 0, "round trip a proxy in front of the model adds (0: no proxy)")
	fs.BoolVar(&p.TLS, "tls", false, "serve TLS with a generated CA")
	fs.BoolVar(&p.HTTPOnly, "http-only", false, "serve HTTP + SSE only, and point codex at it")
	caFile := fs.String("ca-file", "", "where to write the CA with --tls")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	m, err := startPathModel(*latency, p, *caFile)
	if err != nil {
		fmt.Fprintf(stderr, "mock worker: %v\n", err)
		return 1
	}
	defer m.Close()
	fmt.Fprintf(stdout, "ready %s\n", m.URL())
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if sc.Text() == "peak" {
			fmt.Fprintf(stdout, "peak %d\n", m.ResetMaxInFlight())
			continue
		}
		if sc.Text() == "timeline" {
			b, err := json.Marshal(m.Timeline())
			if err != nil {
				fmt.Fprintf(stdout, "error %v\n", err)
				continue
			}
			fmt.Fprintf(stdout, "timeline %s\n", b)
			continue
		}
		dir, ok := strings.CutPrefix(sc.Text(), "home ")
		if !ok {
			fmt.Fprintf(stdout, "error unknown command %q\n", sc.Text())
			continue
		}
		if err := m.WriteCodexHome(dir); err != nil {
			fmt.Fprintf(stdout, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Fprintln(stdout, "ok")
	}
	return 0
}
