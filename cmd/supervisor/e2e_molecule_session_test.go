//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/exectest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// The canvas's New session, the heartbeat's is_busy and runtime_state, and a paused or deleted
// workspace, against a fake platform that answers as the real one does (moleculetest:
// workspace.go, session.go), with real codex.

// One New session, then messages from two devices (each with a sess- id of its own) and a turn
// of the platform's own (canvas-<ws>): one new thread, which all three continue. The model sees
// it: the first message after the press comes with no history, the later ones with it.
func TestE2EMoleculeNewSessionFromTwoDevices(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	key := e.canvasKey()

	e.plat.Enqueue(e.plat.CanvasFrom("A", "a1"), e.plat.CanvasFrom("B", "b1"))
	d.waitPlatform("the replies before the New session", func() bool { return len(e.plat.Notifies()) == 2 })
	d.waitUntil("the chat's thread stored", func() bool { return e.sessionsFile()[key] != "" })
	before := e.sessionsFile()[key]

	e.plat.NewChatSession()
	e.plat.Enqueue(e.plat.CanvasFrom("A", "a2"), e.plat.CanvasFrom("B", "b2"), e.plat.PlatformTurn("restart wake"))
	d.waitPlatform("the replies after the New session", func() bool { return len(e.plat.Notifies()) == 5 })
	for text, want := range map[string][]string{
		"b1":           {"a1", "b1"},
		"a2":           {"a2"},
		"b2":           {"a2", "b2"},
		"restart wake": {"a2", "b2", "restart wake"},
	} {
		if got := e.userTextsFor(text); len(got) != 1 || !slices.Equal(got[0], want) {
			t.Errorf("%q: the model saw %q, want one request with %q", text, got, want)
		}
	}
	after := e.sessionsFile()[key]
	if after == "" || after == before {
		t.Errorf("the chat's thread is %q after the New session, %q before: want a new one", after, before)
	}
	if n := len(d.logsWith("the canvas started a new session: this message opens a new thread")); n != 1 {
		t.Errorf("%d new threads logged for one New session from two devices, want 1", n)
	}

	// Restarted, the daemon still knows which thread the devices' ids belong to.
	d.stop(stopTimeout)
	d2 := e.start()
	e.plat.Enqueue(e.plat.CanvasFrom("B", "b3"))
	d2.waitPlatform("the reply after the restart", func() bool { return len(e.plat.Notifies()) == 6 })
	if got := e.userTextsFor("b3"); len(got) != 1 || !slices.Equal(got[0], []string{"a2", "b2", "restart wake", "b3"}) {
		t.Errorf("b3 after a restart: the model saw %q, want the New session's thread continued", got)
	}
	d2.stop(stopTimeout)
}

// The heartbeat says is_busy while a turn runs, and not once it ended.
func TestE2EMoleculeHeartbeatBusy(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	e := newE2E(t, e2eConfig{Script: func(r mockmodel.Request) mockmodel.Reply {
		if r.LastUserText == "hold" {
			return mockmodel.Reply{Text: "held", Hold: hold}
		}
		return mockmodel.DefaultScript(r)
	}})
	d := e.start("--heartbeat-interval", "50ms")
	e.plat.Enqueue(moleculetest.CanvasMessage("hold"))
	d.waitRequests(1)
	d.waitPlatform("a busy heartbeat", func() bool { return lastHeartbeat(e.plat)["is_busy"] == true })
	close(hold)
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	d.waitPlatform("an idle heartbeat", func() bool { return lastHeartbeat(e.plat)["is_busy"] == false })
	d.stop(stopTimeout)
}

func lastHeartbeat(p *moleculetest.Platform) map[string]any {
	hbs := p.Heartbeats()
	if len(hbs) == 0 {
		return nil
	}
	return hbs[len(hbs)-1]
}

// codex children that exit at once make the heartbeat report runtime_state "wedged" (the
// platform shows the workspace degraded); once codex works again and a turn completes, it is
// cleared and the workspace is online again.
func TestE2EMoleculeHeartbeatWedged(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	broken := filepath.Join(e.root, "codex-broken")
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The version check at start passes; every app-server child exits at once while the flag
	// file exists.
	wrapper := filepath.Join(e.root, "codex-wrapper")
	script := "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = app-server ] && [ -e '" + broken + "' ]; then echo 'codex: broken' >&2; exit 1; fi\ndone\nexec '" + e.codexBin + "' \"$@\"\n"
	if err := exectest.WriteExecutable(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := e.start("--codex-bin", wrapper, "--heartbeat-interval", "50ms")
	d.waitPlatform("a wedged heartbeat", func() bool { return lastHeartbeat(e.plat)["runtime_state"] == "wedged" })
	if s, _ := lastHeartbeat(e.plat)["sample_error"].(string); !strings.Contains(s, "codex keeps crashing") {
		t.Errorf("sample_error of the wedged heartbeat = %q, want the crash loop named", s)
	}
	d.waitPlatform("the workspace degraded", func() bool { return e.plat.WorkspaceStatus() == moleculetest.StatusDegraded })

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	e.plat.Enqueue(moleculetest.CanvasMessage("after the repair"))
	d.waitPlatform("the reply after the repair", func() bool {
		return slices.ContainsFunc(e.notifyTexts(), func(s string) bool { return strings.HasSuffix(s, ": after the repair") })
	})
	d.waitPlatform("a heartbeat without runtime_state", func() bool { return lastHeartbeat(e.plat)["runtime_state"] == "" })
	d.waitPlatform("the workspace online again", func() bool { return e.plat.WorkspaceStatus() == moleculetest.StatusOnline })
	d.stop(stopTimeout)
}

// A paused workspace runs no turn (its rows stay on the platform) and, resumed, answers the
// message once.
func TestE2EMoleculePausedThenResumed(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	e.plat.Pause()
	d := e.start("--heartbeat-interval", "50ms")
	e.plat.Enqueue(moleculetest.CanvasMessage("while paused"))
	base := e.plat.CountCalls(moleculetest.RouteState, 200)
	d.waitPlatform("state checks while paused", func() bool { return e.plat.CountCalls(moleculetest.RouteState, 200) >= base+5 })
	if n := len(e.mock.Requests()); n != 0 || len(e.plat.Notifies()) != 0 {
		t.Fatalf("paused: %d model requests and %d replies, want none", n, len(e.plat.Notifies()))
	}
	e.plat.Resume()
	d.waitPlatform("the reply after the resume", func() bool { return len(e.plat.Notifies()) == 1 })
	d.waitUntil("the row acknowledged", func() bool { return d.bridgeStats().Unacked == 0 })
	if n := len(e.requestsFor("while paused")); n != 1 {
		t.Errorf("codex ran %d turns for the message, want 1", n)
	}
	d.stop(stopTimeout)
}

// A deleted workspace: `run` exits 0 with a line that says so (its token refused by every route
// but the heartbeat, as the platform answers a deleted workspace).
func TestE2EMoleculeDeletedExitsZero(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start("--heartbeat-interval", "50ms")
	e.plat.Enqueue(moleculetest.CanvasMessage("before the deletion"))
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	e.plat.Delete()
	d.waitExit(waitTimeout)
	if n := len(d.logsWith("the workspace was deleted on the platform; stopping and exiting 0")); n != 1 {
		t.Errorf("%d exit lines naming the deletion, want 1; log:\n%s", n, d.logTail(4000))
	}
}
