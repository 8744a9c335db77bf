package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge"
	"github.com/molecule-ai/codex-warm/bridge/moleculetest"
	"github.com/molecule-ai/codex-warm/mockmodel"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// progressScript makes "run the tests" a tool call of a command that runs until the file
// release exists; the rest is the default script.
func progressScript(release string) func(mockmodel.Request) mockmodel.Reply {
	command := "until [ -e " + release + " ]; do sleep 0.1; done; echo released"
	return func(req mockmodel.Request) mockmodel.Reply {
		if !req.HasToolOutput && req.LastUserText == "run the tests" {
			// yield_time_ms: codex keeps the command in the foreground (its item open) for up to
			// this long (codex caps it at 30 s) before handing it to a background session.
			args, _ := json.Marshal(map[string]any{"cmd": command, "login": false, "yield_time_ms": 120_000})
			return mockmodel.Reply{ToolCall: &mockmodel.ToolCall{Name: "exec_command", Arguments: string(args)}}
		}
		return mockmodel.DefaultScript(req)
	}
}

// runningActivity is the start of the activity of progressScript's command.
const runningActivity = `running "until [ -e `

// The Molecule heartbeat, real codex: while codex runs a command the model asked for, the
// heartbeat's current_task names the chat and the command, and no chat message is sent until
// the reply.
func TestE2EHeartbeatShowsRunningCommand(t *testing.T) {
	release := filepath.Join(t.TempDir(), "release")
	e := newE2E(t, e2eConfig{Script: progressScript(release)})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("run the tests"))
	var task string
	defer func() {
		if task == "" {
			t.Logf("heartbeats: %v", e.plat.Heartbeats())
		}
	}()
	// The command stays open for 30 s; the first heartbeat comes 20 s after the start.
	d.waitPlatform("a heartbeat showing the command", func() bool {
		for _, hb := range e.plat.Heartbeats() {
			if s, _ := hb["current_task"].(string); strings.Contains(s, ": "+runningActivity) {
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

// GET /v1/chats/{key} on the local inbox, real codex: while the message's POST waits, the chat
// is busy running the command; after the reply it is idle with no activity.
func TestE2EChatStateShowsActivity(t *testing.T) {
	release := filepath.Join(t.TempDir(), "release")
	e := newE2E(t, e2eConfig{Local: true, Script: progressScript(release)})
	d := e.start()
	c := newLocalClient(t, d)
	if st := c.chatState("k"); st.Session || st.State != bridge.StateNoSession {
		t.Errorf("before any message: %+v", st)
	}
	reply := c.sendAsync("k", "run the tests")
	var st bridge.LocalChat
	d.waitUntil("the chat state to show the command", func() bool {
		st = c.chatState("k")
		return strings.HasPrefix(st.Activity, runningActivity)
	})
	if !st.Session || st.State != supervisor.StateBusy || st.PID == 0 || st.ActivitySince.IsZero() {
		t.Errorf("while running: %+v", st)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := <-reply; r.Status != "completed" || !strings.Contains(r.Text, "released") {
		t.Fatalf("reply %+v", r)
	}
	if st = c.chatState("k"); st.State != supervisor.StateIdle || st.Activity != "" || st.Turns != 1 {
		t.Errorf("after the reply: %+v", st)
	}
}

// chatState reads GET /v1/chats/{key}.
func (c *localClient) chatState(chatKey string) bridge.LocalChat {
	c.t.Helper()
	resp, err := c.hc.Get(c.base + "/v1/chats/" + chatKey)
	if err != nil {
		c.t.Fatalf("GET chat: %v", err)
	}
	defer resp.Body.Close()
	var st bridge.LocalChat
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET chat: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		c.t.Fatal(err)
	}
	return st
}
