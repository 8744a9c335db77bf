package molecule

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
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
//
// Its polls come every 5 ms, a thousand times faster than the production 5 s; the platform's
// rate window is scaled the same way (600 requests in 60 ms instead of a minute), so the inbox
// meets the limit exactly as often as in production: never while it polls alone.
func testConfig(p *moleculetest.Platform, stateDir string, a chat.Answerer, log *zap.Logger) Config {
	p.SetRateLimit(moleculetest.DefaultRateLimit, moleculetest.DefaultRateWindow/1000)
	return Config{
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
	m      *Inbox
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a Molecule until the test ends (or stop).
func start(t *testing.T, cfg Config) *running {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
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

// stateFile is what the tests read of the inbox's state file (package ledger writes it): read
// from outside, as the soak and the e2e tests read it.
type stateFile struct {
	Cursor  string         `json:"cursor"`
	Done    []string       `json:"done"`
	Pending []ledger.Reply `json:"pending"`
	Waits   []ledger.Wait  `json:"waits"`
}

// readState reads the inbox's state file.
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
func statsCond(m *Inbox, f func(Stats) bool) func() bool {
	return func() bool { return f(m.Stats()) }
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
