package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/bridge/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout only detects failures (a condition that never comes); nothing waits for it to pass.
// It is generous because work that takes a second alone takes many times that under -race on a
// loaded machine: TestHostileRows' 10 MB row costs 6 s of CPU under -race, and took 35 s beside
// two busy CPU loops and other tests on two cores.
const waitTimeout = 2 * time.Minute

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// submitCall is one Submit seen by the fake answerer.
type submitCall struct {
	Key, Text string
	Images    []string
}

// fakeAnswerer is a deterministic Answerer. By default it answers "echo: <text>"; fn overrides
// that. It records calls in order and the highest concurrency overall and per chat key.
type fakeAnswerer struct {
	mu        sync.Mutex
	fn        func(ctx context.Context, key, text string) (supervisor.Reply, error)
	calls     []submitCall
	inflight  map[string]int
	total     int
	maxTotal  int
	maxPerKey int
	finished  int
	changed   chan struct{}
}

func newFakeAnswerer(fn func(ctx context.Context, key, text string) (supervisor.Reply, error)) *fakeAnswerer {
	return &fakeAnswerer{fn: fn, inflight: make(map[string]int), changed: make(chan struct{})}
}

func echoReply(key, text string) supervisor.Reply {
	return supervisor.Reply{ChatKey: key, ThreadID: "thread-" + key, TurnID: "turn-1", Text: "echo: " + text,
		Status: "completed", Duration: 42 * time.Millisecond}
}

func (a *fakeAnswerer) broadcastLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *fakeAnswerer) SubmitInput(ctx context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	text := in.Text
	a.mu.Lock()
	a.calls = append(a.calls, submitCall{key, text, in.Images})
	a.inflight[key]++
	a.total++
	a.maxTotal = max(a.maxTotal, a.total)
	a.maxPerKey = max(a.maxPerKey, a.inflight[key])
	fn := a.fn
	a.broadcastLocked()
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inflight[key]--
		a.total--
		a.finished++
		a.broadcastLocked()
		a.mu.Unlock()
	}()
	if fn != nil {
		return fn(ctx, key, text)
	}
	return echoReply(key, text), nil
}

func (a *fakeAnswerer) Calls() []submitCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

func (a *fakeAnswerer) snapshot() (inflight, maxTotal, maxPerKey, finished int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total, a.maxTotal, a.maxPerKey, a.finished
}

// waitFor returns once cond holds, re-checking after every Submit start and end.
func (a *fakeAnswerer) waitFor(ctx context.Context, cond func() bool) error {
	for {
		a.mu.Lock()
		ch := a.changed
		a.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fake answerer: condition not met: %w", ctx.Err())
		case <-ch:
		}
	}
}

// gate blocks Submit calls until released; tests use it to hold turns in flight.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) wait(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// gatedAnswerer echoes every message once g opens.
func gatedAnswerer(g *gate) *fakeAnswerer {
	return newFakeAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if err := g.wait(ctx); err != nil {
			return supervisor.Reply{}, err
		}
		return echoReply(key, text), nil
	})
}

// newTestLogger returns a logger that records everything (for assertions) and also prints
// warnings and errors to the test log (for debugging failures).
func newTestLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	tl := zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)).Core()
	return zap.New(zapcore.NewTee(core, tl)), logs
}

// testConfig is a Molecule config with fast timers for platform p. RequestTimeout is not one of
// them: a request the platform answered must not time out on a loaded machine, or its retry
// reaches the platform twice and breaks the tests' exact counts of calls. Tests with a hung
// request set their own.
func testConfig(p *moleculetest.Platform, stateDir string, a Answerer, log *zap.Logger) MoleculeConfig {
	return MoleculeConfig{
		PlatformURL:       p.URL(),
		WorkspaceID:       p.WorkspaceID(),
		Token:             p.Token(),
		OrgID:             "org-7",
		StateDir:          stateDir,
		Answerer:          a,
		Logger:            log,
		PollInterval:      5 * time.Millisecond,
		HeartbeatInterval: time.Hour,
		RequestTimeout:    DefaultRequestTimeout,
		RetryInitial:      5 * time.Millisecond,
		RetryMax:          20 * time.Millisecond,
		// A few retries of a busy answer, then the busy text: tests of busy replies stay fast.
		BusyRetryFor: 50 * time.Millisecond,
		DrainTimeout: 5 * time.Second,
	}
}

// running is a Molecule whose Run goroutine the test owns.
type running struct {
	m      *Molecule
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a Molecule until the test ends (or stop).
func start(t *testing.T, cfg MoleculeConfig) *running {
	t.Helper()
	m, err := NewMolecule(cfg)
	if err != nil {
		t.Fatalf("NewMolecule: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// stop cancels Run and waits for it to return.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(waitTimeout):
			r.err = errors.New("Run did not return after cancel")
		}
	})
	return r.err
}

// readState reads the bridge's state file.
func readState(t *testing.T, dir string) stateFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, StateFileName))
	if err != nil {
		t.Fatalf("read state: %v", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("parse state: %v\n%s", err, b)
	}
	return st
}

// stateCond is a WaitFor condition over the state file on disk (false while it does not exist).
func stateCond(t *testing.T, dir string, f func(stateFile) bool) func() bool {
	return func() bool {
		if _, err := os.Stat(filepath.Join(dir, StateFileName)); err != nil {
			return false
		}
		return f(readState(t, dir))
	}
}

// statsCond is a WaitFor condition over the Molecule's stats.
func statsCond(m *Molecule, f func(Stats) bool) func() bool {
	return func() bool { return f(m.Stats()) }
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
