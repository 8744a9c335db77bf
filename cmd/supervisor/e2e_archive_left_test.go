package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/sessions"
)

// ageLeftThreads makes the threads chats left (threads-archive.jsonl's lines without an event)
// left days ago, in the state directory of a stopped daemon.
func (e *e2e) ageLeftThreads(days int) {
	e.t.Helper()
	path := filepath.Join(e.stateDir, sessions.ArchiveFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	at := time.Now().Add(-time.Duration(days) * 24 * time.Hour).UTC().Format(time.RFC3339)
	var out bytes.Buffer
	for _, raw := range bytes.Split(bytes.TrimSpace(b), []byte{'\n'}) {
		var ln map[string]any
		if err := json.Unmarshal(raw, &ln); err != nil {
			e.t.Fatal(err)
		}
		if ln["event"] == nil {
			ln["archived_at"] = at
		}
		nb, _ := json.Marshal(ln)
		out.Write(append(nb, '\n'))
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// The thread a chat leaves with /new falls under the same retention: the daemon's sweep archives
// it --archive-idle-after after the chat left it (its rollout moves to archived_sessions) while
// the chat's new thread stays live, and --delete-after deletes it for good; the chat goes on with
// its new conversation throughout.
func TestE2EArchiveLeftThread(t *testing.T) {
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--spares", "0", "--metrics-listen", "127.0.0.1:0")
	c := newLocalClient(t, d)
	old := c.send("n", "one").ThreadID
	c.send("n", "/new")
	fresh := c.send("n", "two").ThreadID
	if fresh == old {
		t.Fatal("/new kept the thread")
	}
	if v := scrapeMetrics(t, d.ready.Daemon.MetricsListen, "").MustValue(t, "codex_warm_threads_left", nil); v != 1 {
		t.Errorf("codex_warm_threads_left = %v after /new, want 1", v)
	}
	d.stop(stopTimeout)
	e.ageLeftThreads(40)

	d = e.start("--spares", "0", "--archive-idle-after", "30d", "--metrics-listen", "127.0.0.1:0")
	c = newLocalClient(t, d)
	d.waitUntil("the left thread archived", func() bool {
		return slices.ContainsFunc(e.archiveLines(), func(l retention.Line) bool {
			return l.Event == retention.EventArchived && l.ThreadID == old && l.Left
		})
	})
	if got := e.rolloutIn(old); got != "archived_sessions" {
		t.Errorf("the left thread's rollout is under %q, want archived_sessions", got)
	}
	if got := e.rolloutIn(fresh); got != "sessions" || e.sessionsFile()["n"] != fresh {
		t.Errorf("the chat's live thread: rollout under %q, sessions.json %v", got, e.sessionsFile())
	}
	code, out := e.archiveCmd("--delete-after", "1ns", "--dry-run")
	if code != 0 || !strings.Contains(out, "would delete chat n thread "+old) || !strings.Contains(out, "left by the chat") {
		t.Fatalf("dry run: exit %d: %s", code, out)
	}
	code, out = e.archiveCmd("--delete-after", "1ns")
	if code != 0 || !strings.Contains(out, "0 archived, 1 deleted") {
		t.Fatalf("archive --delete-after: exit %d: %s", code, out)
	}
	if got := e.rolloutIn(old); got != "" {
		t.Errorf("the left thread's rollout is under %q after deleting, want gone", got)
	}
	if v := scrapeMetrics(t, d.ready.Daemon.MetricsListen, "").MustValue(t, "codex_warm_threads_left", nil); v != 0 {
		t.Errorf("codex_warm_threads_left = %v after the left thread was deleted, want 0", v)
	}
	r := c.send("n", "three")
	if r.ThreadID != fresh || strings.Contains(r.Text, "deleted") {
		t.Fatalf("the chat's next message: %+v, want its live thread %s", r, fresh)
	}
	if got := e.userTextsFor("three"); len(got) != 1 || !slices.Equal(got[0], []string{"two", "three"}) {
		t.Fatalf("the model saw %q, want [two three]", got)
	}
	d.stop(stopTimeout)
}
