package molecule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// A paused workspace answers nothing and leaves its rows on the platform; it keeps asking the
// state with the heartbeat and, resumed, answers the message once.
func TestPausedWorkspaceAnswersAfterResume(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, logs := newTestLogger(t)
	a := chattest.NewAnswerer(nil)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.HeartbeatInterval = 5 * time.Millisecond
	p.Pause()
	start(t, cfg)
	ctx := waitCtx(t)
	p.Enqueue(moleculetest.CanvasMessage("while paused"))
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteState, 200) >= 5 }))
	if n := len(a.Calls()); n != 0 {
		t.Fatalf("%d turns while the workspace was paused, want none", n)
	}
	if n := p.CountCalls(moleculetest.RouteActivity, 200); n != 0 {
		t.Errorf("%d activity polls while the workspace was paused, want none (the rows stay on the platform)", n)
	}
	if n := logs.FilterMessageSnippet("workspace paused on the platform").Len(); n != 1 {
		t.Errorf("%d log lines about the pause, want 1", n)
	}
	p.Resume()
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	if n := len(a.Calls()); n != 1 {
		t.Errorf("%d turns after the resume, want 1", n)
	}
	if n := logs.FilterMessageSnippet("workspace resumed on the platform").Len(); n != 1 {
		t.Errorf("%d log lines about the resume, want 1", n)
	}

	// Paused again while running: a message sent meanwhile waits for the next resume.
	p.Pause()
	n := p.CountCalls(moleculetest.RouteState, 200)
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteState, 200) >= n+2 }))
	p.Enqueue(moleculetest.CanvasMessage("paused again"))
	n = p.CountCalls(moleculetest.RouteState, 200)
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteState, 200) >= n+3 }))
	if got := len(a.Calls()); got != 1 {
		t.Fatalf("%d turns after the second pause, want still 1", got)
	}
	p.Resume()
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 2 }))
}

// runUntilExit runs an inbox and returns Run's error once it returns by itself.
func runUntilExit(t *testing.T, cfg Config) error {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(waitTimeout):
		cancel()
		<-done
		t.Fatal("Run did not return for a deleted workspace")
		return nil
	}
}

// A deleted workspace stops the inbox with ErrWorkspaceDeleted, whichever way the platform tells
// it: its token refused by /state while the heartbeat passes (the real platform, to the
// workspace's own token), the token it issued at a later register refused, or /state's 404
// {"deleted":true} (to an org-scoped token).
func TestDeletedWorkspaceStopsRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  moleculetest.Config
		// restart deletes the workspace before the inbox starts (its register then gets a token).
		restart bool
	}{
		{name: "token refused, heartbeat passes"},
		{name: "deleted before the start", restart: true},
		{name: "state says deleted", cfg: moleculetest.Config{OrgScopedToken: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := moleculetest.NewPlatform(t, tc.cfg)
			log, logs := newTestLogger(t)
			a := chattest.NewAnswerer(nil)
			cfg := testConfig(p, t.TempDir(), a, log)
			cfg.HeartbeatInterval = 5 * time.Millisecond
			if tc.restart {
				p.Delete()
			} else {
				p.Enqueue(moleculetest.CanvasMessage("before the deletion"))
				go func() {
					_ = p.WaitFor(waitCtx(t), func() bool { return len(p.Notifies()) == 1 })
					p.Delete()
				}()
			}
			err := runUntilExit(t, cfg)
			if !errors.Is(err, ErrWorkspaceDeleted) {
				t.Fatalf("Run = %v, want ErrWorkspaceDeleted", err)
			}
			if n := logs.FilterMessageSnippet("workspace deleted on the platform").Len(); n != 1 {
				t.Errorf("%d log lines naming the deletion, want 1", n)
			}
		})
	}
}

// A platform without the state route (404 without "deleted") and a state route that fails keep
// the inbox running.
func TestStateRouteMissingKeepsRunning(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
	cfg.HeartbeatInterval = 5 * time.Millisecond
	p.FailNext(moleculetest.RouteState, 10, 404)
	p.FailNext(moleculetest.RouteState, 5, 503)
	p.FailNext(moleculetest.RouteState, deletedAfterBeats-1, 401) // fewer than make a deletion
	start(t, cfg)
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteState, 200) >= 2 }))
	p.Enqueue(moleculetest.CanvasMessage("still here"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
}
