package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// canvasSay sends text from the canvas and returns the answer the platform got for it.
func (e *e2e) canvasSay(d *daemonProc, text string) string {
	e.t.Helper()
	n := len(e.plat.Notifies())
	e.plat.Enqueue(moleculetest.CanvasMessage(text))
	d.waitPlatform("the answer to "+text, func() bool { return len(e.plat.Notifies()) > n })
	return e.notifyTexts()[n]
}

// peerSay sends text from peer and returns the answer the peer got.
func (e *e2e) peerSay(d *daemonProc, peer, text string) string {
	e.t.Helper()
	n := len(e.plat.A2ASends())
	e.plat.Enqueue(moleculetest.PeerMessage(peer, text))
	d.waitPlatform("the answer to "+peer+"'s "+text, func() bool { return len(e.plat.A2ASends()) > n })
	return e.plat.A2ASends()[n].Text
}

// lastRequestFor is the model's last request for the message text.
func (e *e2e) lastRequestFor(text string) mockmodel.Request {
	e.t.Helper()
	rs := e.requestsFor(text)
	if len(rs) == 0 {
		e.t.Fatalf("no model request for %q", text)
	}
	return rs[len(rs)-1]
}

// /model and /effort on the real codex: the next request of that chat only carries them, in the
// same child; a refused name or level changes nothing; a peer's /model is refused; the choice
// outlives a restart, a reload, a crashed child and /new; default goes back to the configured ones although codex wrote the
// override into the thread's rollout. The mock is a provider of its own, so what may be chosen
// is --allow-models and --allow-efforts (codex's catalog does not count; no test names it).
func TestE2EChatModelAndEffort(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	installReloadable(t, e)
	flags := []string{"--allow-models", "mock-large,mock-small", "--allow-efforts", "low,high", "--effort", "low"}
	d := e.start(flags...)
	e.canvasSay(d, "one")
	base := e.lastRequestFor("one")
	if base.Model == "" || base.Effort != "low" {
		t.Fatalf("the first request: model %q effort %q, want codex's config model and --effort low", base.Model, base.Effort)
	}
	pid := childPID(d.status(), e.canvasKey())

	if got := e.canvasSay(d, "/model mock-large"); !strings.Contains(got, "model for this chat: mock-large") {
		t.Errorf("/model mock-large: %q", got)
	}
	if got := e.canvasSay(d, "/effort high"); !strings.Contains(got, "effort for this chat: high") {
		t.Errorf("/effort high: %q", got)
	}
	for _, bad := range []string{"/model gpt-nonesuch", "/effort extreme"} {
		if got := e.canvasSay(d, bad); !strings.Contains(got, "nothing changed") {
			t.Errorf("%s: %q, want a refusal", bad, got)
		}
	}
	e.canvasSay(d, "two")
	if r := e.lastRequestFor("two"); r.Model != "mock-large" || r.Effort != "high" {
		t.Errorf("after /model and /effort: model %q effort %q, want mock-large high", r.Model, r.Effort)
	}
	if got := childPID(d.status(), e.canvasKey()); got != pid || pid == 0 {
		t.Errorf("the chat's child went from pid %d to %d: a model change needs no new child", pid, got)
	}
	if got := e.peerSay(d, "peer-a", "/model mock-small"); !strings.Contains(got, "may not choose") {
		t.Errorf("a peer's /model: %q, want it refused", got)
	}
	e.peerSay(d, "peer-a", "peer hello")
	if r := e.lastRequestFor("peer hello"); r.Model != base.Model || r.Effort != "low" {
		t.Errorf("the peer's chat: model %q effort %q, want the configured %q low (another chat's choice leaked?)", r.Model, r.Effort, base.Model)
	}
	models := d.status().Models
	if models == nil || models.Chats[e.canvasKey()].Model != "mock-large" || len(models.Chats) != 1 {
		t.Errorf("status models: %+v", models)
	}
	d.stop(stopTimeout)

	d = e.start(flags...)
	e.canvasSay(d, "three")
	if r := e.lastRequestFor("three"); r.Model != "mock-large" || r.Effort != "high" {
		t.Errorf("after a restart: model %q effort %q, want mock-large high", r.Model, r.Effort)
	}
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload: exit %d: %s\n%s", code, out, d.logTail(40))
	}
	e.canvasSay(d, "after the reload")
	if r := e.lastRequestFor("after the reload"); r.Model != "mock-large" || r.Effort != "high" {
		t.Errorf("after a reload: model %q effort %q, want mock-large high", r.Model, r.Effort)
	}
	// A crashed child: the chat's next message resumes the thread in a new one, on its model.
	crashed := childPID(d.status(), e.canvasKey())
	if err := syscall.Kill(crashed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.waitUntil("the crashed child gone", func() bool { return childPID(d.status(), e.canvasKey()) != crashed })
	e.canvasSay(d, "after the crash")
	if r := e.lastRequestFor("after the crash"); r.Model != "mock-large" || r.Effort != "high" {
		t.Errorf("after a crash: model %q effort %q, want mock-large high", r.Model, r.Effort)
	}
	// /new starts a new conversation on the chat's model.
	e.canvasSay(d, "/new")
	e.canvasSay(d, "after new")
	if r := e.lastRequestFor("after new"); r.Model != "mock-large" || r.Effort != "high" || len(r.UserTexts) != 1 {
		t.Errorf("after /new: model %q effort %q, %d user texts; want mock-large high on a new conversation", r.Model, r.Effort, len(r.UserTexts))
	}
	e.canvasSay(d, "/model default")
	e.canvasSay(d, "/effort default")
	e.canvasSay(d, "four")
	if r := e.lastRequestFor("four"); r.Model != base.Model || r.Effort != "low" {
		t.Errorf("after default: model %q effort %q, want %q low", r.Model, r.Effort, base.Model)
	}
	d.stop(stopTimeout)
}

// /compact on the real codex: it waits for the chat's running turn and says so; the chat's next
// request is smaller (the summary instead of the answers) and the conversation goes on;
// /compact on a chat without a conversation says so without a model call.
func TestE2EChatCompact(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	script := compactionScript(0)
	e := newE2E(t, e2eConfig{Script: func(req mockmodel.Request) mockmodel.Reply {
		if strings.HasPrefix(req.LastUserText, "held") {
			r := mockmodel.DefaultScript(req)
			r.Hold = hold
			return r
		}
		return script(req)
	}})
	d := e.start()
	if got := e.canvasSay(d, "/compact"); !strings.Contains(got, "no conversation yet") || e.mock.RequestCount() != 0 {
		t.Errorf("/compact before any message: %q, %d model requests", got, e.mock.RequestCount())
	}
	long := strings.Repeat("padding ", 400)
	e.canvasSay(d, "one "+long)
	n := len(e.plat.Notifies())
	e.plat.Enqueue(moleculetest.CanvasMessage("held " + long))
	d.waitRequests(e.mock.RequestCount() + 1)
	e.plat.Enqueue(moleculetest.CanvasMessage("/compact"))
	d.waitUntil("/compact waiting behind the running turn", func() bool {
		for _, c := range d.status().Snapshot.Children {
			if c.ChatKey == e.canvasKey() && c.Queued > 0 {
				return true
			}
		}
		return false
	})
	close(hold)
	d.waitPlatform("the held reply and the /compact answer", func() bool { return len(e.plat.Notifies()) >= n+2 })
	held := e.lastRequestFor("held " + long)
	answers := e.notifyTexts()[n:]
	if !slices.ContainsFunc(answers, func(s string) bool {
		return strings.HasPrefix(s, "compacted (after the messages codex was working on): the conversation went from about")
	}) {
		t.Fatalf("answers %q: want /compact's, saying it waited, with the sizes", answers)
	}
	if e.compactionRequests() != 1 {
		t.Errorf("%d compaction requests, want 1", e.compactionRequests())
	}
	e.canvasSay(d, "three")
	three := e.lastRequestFor("three")
	in, before := strings.Join(rawInputs(three), "\n"), strings.Join(rawInputs(held), "\n")
	if !strings.Contains(in, compactSummary) || len(in) >= len(before) {
		t.Errorf("the request after /compact (%d bytes) is not smaller than the one before (%d), or lacks the summary", len(in), len(before))
	}
	d.stop(stopTimeout)
}

// patchScript has the model add the file a.txt with codex's apply_patch (through exec_command,
// which codex turns into a fileChange item) when the message is "PATCH".
func patchScript(req mockmodel.Request) mockmodel.Reply {
	if req.LastUserText == "PATCH" && !req.HasToolOutput {
		patch := "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\nEOF\n"
		args, _ := json.Marshal(map[string]any{"cmd": patch})
		return mockmodel.Reply{ToolCall: &mockmodel.ToolCall{Name: "exec_command", Arguments: string(args)}}
	}
	return mockmodel.DefaultScript(req)
}

// /undo on the real codex: the last exchange leaves what the model sees next, and the answer
// names the file its turn added, which stays; bad input is answered without a model call.
func TestE2EChatUndo(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Script: patchScript})
	d := e.start("--approval", "accept")
	e.canvasSay(d, "one")
	e.canvasSay(d, "PATCH")
	file := filepath.Join(e.workDir, "a.txt")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the patch did not add a.txt: %v", err)
	}
	requests := e.mock.RequestCount()
	for _, bad := range []string{"/undo 0", "/undo 99"} {
		if got := e.canvasSay(d, bad); !strings.HasPrefix(got, "usage: /undo") {
			t.Errorf("%s: %q", bad, got)
		}
	}
	if got := e.canvasSay(d, "/undo 5"); !strings.Contains(got, "has only 2") {
		t.Errorf("/undo 5: %q", got)
	}
	got := e.canvasSay(d, "/undo")
	if !strings.Contains(got, `"PATCH"`) || strings.Contains(got, `"one"`) || !strings.Contains(got, "stay changed: "+file) {
		t.Errorf("/undo: %q, want it to name PATCH alone and %s", got, file)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("a.txt is gone after /undo: %v", err)
	}
	if e.mock.RequestCount() != requests {
		t.Errorf("the commands made %d model requests", e.mock.RequestCount()-requests)
	}
	e.canvasSay(d, "three")
	if r := e.lastRequestFor("three"); !slices.Equal(r.UserTexts, []string{"one", "three"}) {
		t.Errorf("after /undo the model saw %q, want [one three]", r.UserTexts)
	}
	d.stop(stopTimeout)
}

// The local inbox answers /model and /effort too, and its chats' requests carry the choice.
func TestE2ELocalChatModel(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--allow-models", "mock-large", "--allow-efforts", "low,high")
	c := newLocalClient(t, d)
	if r := c.send("k", "/model mock-large"); r.Status != "command" || !strings.Contains(r.Text, "model for this chat: mock-large") {
		t.Fatalf("/model on the local inbox: %+v", r)
	}
	if r := c.send("k", "/effort high"); r.Status != "command" || !strings.Contains(r.Text, "effort for this chat: high") {
		t.Fatalf("/effort on the local inbox: %+v", r)
	}
	if r := c.send("k", "hello"); r.Status != "completed" {
		t.Fatalf("hello: %+v", r)
	}
	if r := e.lastRequestFor("hello"); r.Model != "mock-large" || r.Effort != "high" {
		t.Errorf("the local chat's request: model %q effort %q, want mock-large high", r.Model, r.Effort)
	}
	d.stop(stopTimeout)
}
