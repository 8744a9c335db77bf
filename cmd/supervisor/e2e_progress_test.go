package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/moleculetest"
	"github.com/molecule-ai/codex-warm/mockmodel"
)

// The Molecule heartbeat, real codex: while codex runs a command the model asked for, the
// heartbeat's current_task names the chat and the command, and no chat message is sent until
// the reply.
func TestE2EHeartbeatShowsRunningCommand(t *testing.T) {
	release := filepath.Join(t.TempDir(), "release")
	// The command runs until the test has seen the heartbeat: it waits for the release file.
	command := "until [ -e " + release + " ]; do sleep 0.1; done; echo released"
	script := func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && req.LastUserText == "run the tests" {
			// yield_time_ms: codex keeps the command in the foreground (the item open) for up to
			// this long before handing it to a background session.
			args, _ := json.Marshal(map[string]any{"cmd": command, "login": false, "yield_time_ms": 120_000})
			return mockmodel.Reply{ToolCall: &mockmodel.ToolCall{Name: "exec_command", Arguments: string(args)}}
		}
		return mockmodel.DefaultScript(req)
	}
	e := newE2E(t, e2eConfig{Script: script})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("run the tests"))
	var task string
	defer func() {
		if task == "" {
			t.Logf("heartbeats: %v", e.plat.Heartbeats())
		}
	}()
	d.waitPlatform("a heartbeat showing the command", func() bool {
		for _, hb := range e.plat.Heartbeats() {
			if s, _ := hb["current_task"].(string); strings.Contains(s, `: running "until [ -e `) {
				task = s
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(task, "canvas:") || !strings.HasSuffix(task, "s)") {
		t.Errorf("current_task %q, want `canvas:<ws>: running \"…\" (<age>)`", task)
	}
	if n := len(e.plat.Notifies()); n != 0 {
		t.Errorf("%d chat messages while the turn ran; progress belongs in the heartbeat", n)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d.waitPlatform("the reply", func() bool { return len(e.plat.Notifies()) == 1 })
	if r := e.notifyTexts()[0]; !strings.Contains(r, "released") {
		t.Errorf("reply %q lacks the command's output", r)
	}
}
