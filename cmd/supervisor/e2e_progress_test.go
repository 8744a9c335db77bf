package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
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
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newE2E(t, e2eConfig{Script: progressScript(release)})
	// A heartbeat each second instead of every 20 s: the test waits for the first one that shows
	// the command, which the default interval would make a 20 s wait.
	d := e.start("--heartbeat-interval", "1s")
	e.plat.Enqueue(moleculetest.CanvasMessage("run the tests"))
	var task string
	defer func() {
		if task == "" {
			t.Logf("heartbeats: %v", e.plat.Heartbeats())
		}
	}()
	// The command's item stays open (up to codex's 30 s cap) until the test releases it.
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
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newE2E(t, e2eConfig{Local: true, Script: progressScript(release)})
	d := e.start()
	c := newLocalClient(t, d)
	if st := c.chatState("k"); st.Session || st.State != local.StateNoSession {
		t.Errorf("before any message: %+v", st)
	}
	reply := c.sendAsync("k", "run the tests")
	var st local.Chat
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
func (c *localClient) chatState(chatKey string) local.Chat {
	c.t.Helper()
	resp, err := c.hc.Get(c.base + "/v1/chats/" + chatKey)
	if err != nil {
		c.t.Fatalf("GET chat: %v", err)
	}
	defer resp.Body.Close()
	var st local.Chat
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET chat: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

// The local inbox's event stream, real codex: the command's item_started arrives while the
// command still runs (the test releases it only then), followed by its item_completed with the
// exit code, the agent message's item_completed, and the reply event last.
func TestE2EMessageEventStream(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newE2E(t, e2eConfig{Local: true, Script: progressScript(release)})
	d := e.start()
	c := newLocalClient(t, d)
	req, err := http.NewRequest("POST", c.base+"/v1/chats/k/messages", strings.NewReader(`{"text":"run the tests"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	var seen []string
	var deltas strings.Builder
	var reply map[string]any
	for reply == nil {
		name, data, err := readSSE(r)
		if err != nil {
			t.Fatalf("after %v: %v", seen, err)
		}
		summary, _ := data["summary"].(string)
		seen = append(seen, name+" "+summary)
		switch {
		case name == "item_started" && strings.HasPrefix(summary, runningActivity):
			// The stream is live: the command is still waiting for this file.
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		case name == "delta":
			d, _ := data["delta"].(string)
			deltas.WriteString(d)
		case name == local.EventReply:
			reply = data
		case name == local.EventError:
			t.Fatalf("error event %v after %v", data, seen)
		}
	}
	all := strings.Join(seen, "\n")
	if !strings.HasPrefix(all, "turn_started") || !strings.Contains(all, `item_completed ran "until [ -e `) ||
		!strings.Contains(all, "(exit 0)") {
		t.Errorf("events:\n%s", all)
	}
	text, _ := reply["text"].(string)
	// The daemon opts its children out of item/agentMessage/delta, so there are none; any there
	// were would have to be the reply's.
	if reply["status"] != "completed" || !strings.Contains(text, "released") || !strings.HasPrefix(text, deltas.String()) ||
		!strings.Contains(all, "item_completed wrote: tool said") {
		t.Errorf("reply %v; deltas %q", reply, deltas.String())
	}
	if _, _, err := readSSE(r); err != io.EOF {
		t.Errorf("stream goes on after the reply: %v", err)
	}
	// The documented list of events holds: each docs/chat.md names for a turn that ends with a
	// reply was sent (issue 17, item 13: the README named "delta", which the daemon never sends).
	for _, name := range documentedStreamEvents(t) {
		if name != local.EventError && !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, name+" ") }) {
			t.Errorf("docs/chat.md lists the event %q, but the stream sent only:\n%s", name, all)
		}
	}
}

// documentedStreamEvents returns the event names docs/chat.md's "Local inbox streaming" paragraph
// lists: the backquoted words after "server-sent events:" up to the first full stop, leaving out
// what is in parentheses (field names, examples).
func documentedStreamEvents(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/chat.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "answers with server-sent events:")
	if !ok {
		t.Fatal("docs/chat.md: the event stream paragraph is gone")
	}
	var top strings.Builder
	depth := 0
	for _, r := range after {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case depth == 0:
			top.WriteRune(r)
		}
	}
	list, _, _ := strings.Cut(top.String(), ". ")
	var names []string
	for i, part := range strings.Split(list, "`") {
		if i%2 == 1 && !strings.ContainsAny(part, " .(") {
			names = append(names, part)
		}
	}
	if len(names) == 0 {
		t.Fatal("docs/chat.md: no event names in the event stream paragraph")
	}
	return names
}

// readSSE reads the next server-sent event; io.EOF at the end of the stream.
func readSSE(r *bufio.Reader) (name string, data map[string]any, err error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", nil, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data, nil
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				return "", nil, err
			}
		}
	}
}
