package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/sessions"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// ageChats makes keys' last turns days ago in the state directory of a stopped daemon, as if
// that much time had passed: usage.json gets every chat's totals (the journal's newer ones
// merged in) and the journal is emptied.
func (e *e2e) ageChats(days int, keys ...string) {
	e.t.Helper()
	chats := map[string]map[string]any{}
	var file struct {
		Chats map[string]map[string]any `json:"chats"`
	}
	if b, err := os.ReadFile(filepath.Join(e.stateDir, supervisor.UsageFile)); err == nil {
		if err := json.Unmarshal(b, &file); err != nil {
			e.t.Fatal(err)
		}
		for k, c := range file.Chats {
			chats[k] = c
		}
	}
	journal := filepath.Join(e.stateDir, supervisor.UsageJournalFile)
	if b, err := os.ReadFile(journal); err == nil {
		for _, ln := range bytes.Split(b, []byte{'\n'}) {
			var c map[string]any
			if json.Unmarshal(ln, &c) != nil {
				continue
			}
			k, _ := c["chat_key"].(string)
			delete(c, "chat_key")
			if old, ok := chats[k]; !ok || old["turns"].(float64) <= c["turns"].(float64) {
				chats[k] = c
			}
		}
	}
	at := time.Now().Add(-time.Duration(days) * 24 * time.Hour).UTC().Format(time.RFC3339)
	for _, k := range keys {
		if chats[k] == nil {
			e.t.Fatalf("chat %s has no usage to age", k)
		}
		chats[k]["last_turn_at"] = at
	}
	b, err := json.Marshal(map[string]any{"chats": chats})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.stateDir, supervisor.UsageFile), b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(journal, nil, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// rolloutIn names the top folder of CODEX_HOME holding thread's rollout ("" for none).
func (e *e2e) rolloutIn(thread string) string {
	e.t.Helper()
	where := ""
	_ = filepath.WalkDir(e.codexHome, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "rollout-") && strings.Contains(d.Name(), thread) {
			rel, _ := filepath.Rel(e.codexHome, path)
			where = strings.Split(rel, string(filepath.Separator))[0]
		}
		return nil
	})
	return where
}

// archiveLines returns threads-archive.jsonl's lines with an event.
func (e *e2e) archiveLines() []retention.Line {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.stateDir, sessions.ArchiveFileName))
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatal(err)
	}
	var out []retention.Line
	for _, raw := range bytes.Split(b, []byte{'\n'}) {
		var ln retention.Line
		if json.Unmarshal(raw, &ln) == nil && ln.Event != "" {
			out = append(out, ln)
		}
	}
	return out
}

func hasLine(lines []retention.Line, event, key, thread string) bool {
	return slices.ContainsFunc(lines, func(l retention.Line) bool {
		return l.Event == event && l.ChatKey == key && l.ThreadID == thread
	})
}

// writeUpload saves a 5-byte file as a user's upload of chatKey and returns its path.
func (e *e2e) writeUpload(chatKey string) string {
	e.t.Helper()
	dir := filepath.Join(chatfiles.Folder(e.workDir, chatKey), chatfiles.UploadsDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	p := filepath.Join(dir, "f1-note.txt")
	if err := os.WriteFile(p, []byte("hello"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// archiveCmd runs `supervisor archive` with args against the environment's state directory.
func (e *e2e) archiveCmd(args ...string) (int, string) {
	var out bytes.Buffer
	env := map[string]string{"CODEX_HOME": e.codexHome, "CODEX_BIN": e.codexBin}
	code := runMain(context.Background(), append([]string{"archive", "--state-dir", e.stateDir}, args...),
		func(k string) string { return env[k] }, &out, &out)
	return code, out.String()
}

// Chats idle past --archive-idle-after are archived with codex's thread/archive by the daemon's
// sweep: their rollouts leave CODEX_HOME/sessions for archived_sessions, they leave
// sessions.json, and each step is in threads-archive.jsonl; a chat with a recent turn stays. An
// archived chat that writes again is unarchived and continues its conversation (the model sees
// its earlier turn). `supervisor archive --delete-after` on the running daemon deletes the
// others for good (the rollouts are gone); such a chat's next message starts a new thread and
// says so once. With the daemon stopped, the command works on the state directory itself.
func TestE2EArchiveIdleChats(t *testing.T) {
	e := newE2E(t, e2eConfig{Local: true})
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	threads := map[string]string{}
	for _, k := range []string{"a", "b", "c", "live"} {
		threads[k] = c.send(k, "one "+k).ThreadID
	}
	d.stop(stopTimeout)
	e.ageChats(40, "a", "b", "c")

	d = e.start("--spares", "0", "--archive-idle-after", "30d", "--metrics-listen", "127.0.0.1:0")
	c = newLocalClient(t, d)
	d.waitUntil("the idle chats archived", func() bool {
		m := e.sessionsFile()
		done := slices.DeleteFunc(e.archiveLines(), func(l retention.Line) bool { return l.Event != retention.EventArchived })
		return len(m) == 1 && m["live"] == threads["live"] && len(done) == 3
	})
	lines := e.archiveLines()
	for _, k := range []string{"a", "b", "c"} {
		if got := e.rolloutIn(threads[k]); got != "archived_sessions" {
			t.Errorf("chat %s: rollout under %q, want archived_sessions", k, got)
		}
		if !hasLine(lines, retention.EventArchiveIntent, k, threads[k]) || !hasLine(lines, retention.EventArchived, k, threads[k]) {
			t.Errorf("chat %s: threads-archive.jsonl lacks its intent and archived lines: %+v", k, lines)
		}
	}
	if got := e.rolloutIn(threads["live"]); got != "sessions" {
		t.Errorf("the recent chat's rollout is under %q, want sessions", got)
	}

	back := c.send("a", "two a")
	if back.ThreadID != threads["a"] || strings.Contains(back.Text, "deleted") {
		t.Fatalf("the archived chat came back on thread %s (%q), want %s", back.ThreadID, back.Text, threads["a"])
	}
	if got := e.userTextsFor("two a"); len(got) != 1 || !slices.Equal(got[0], []string{"one a", "two a"}) {
		t.Fatalf("the model saw %q for the returning chat, want [one a, two a]", got)
	}
	if got := e.rolloutIn(threads["a"]); got != "sessions" {
		t.Errorf("unarchived rollout under %q", got)
	}
	if e.sessionsFile()["a"] != threads["a"] || !hasLine(e.archiveLines(), retention.EventUnarchived, "a", threads["a"]) {
		t.Errorf("the unarchived chat is not live again / not recorded: %v", e.sessionsFile())
	}

	code, out := e.archiveCmd("--delete-after", "1ns", "--dry-run")
	if code != 0 || !strings.Contains(out, "would delete chat b") || !strings.Contains(out, "0 archived, 2 deleted") {
		t.Fatalf("dry run with the daemon up: exit %d: %s", code, out)
	}
	if e.rolloutIn(threads["b"]) != "archived_sessions" {
		t.Fatal("the dry run deleted")
	}
	upB, upLive := e.writeUpload("b"), e.writeUpload("live")
	code, out = e.archiveCmd("--delete-after", "1ns")
	if code != 0 || !strings.Contains(out, "0 archived, 2 deleted") || !strings.Contains(out, "removed 1 uploads (5 bytes)") {
		t.Fatalf("archive --delete-after with the daemon up: exit %d: %s", code, out)
	}
	if exists(upB) || !exists(upLive) {
		t.Fatalf("the deleted chat's upload is there %v, the live chat's %v; want gone, kept", exists(upB), exists(upLive))
	}
	if code, out = e.archiveCmd("--uploads-after", "1ns"); code != 0 || exists(upLive) {
		t.Fatalf("--uploads-after kept the upload: exit %d: %s", code, out)
	}
	for _, k := range []string{"b", "c"} {
		if got := e.rolloutIn(threads[k]); got != "" {
			t.Errorf("chat %s: rollout under %q after deleting, want gone", k, got)
		}
		if !hasLine(e.archiveLines(), retention.EventDeleted, k, threads[k]) {
			t.Errorf("chat %s: no deleted line", k)
		}
	}
	fresh := c.send("b", "two b")
	if fresh.ThreadID == threads["b"] || !strings.Contains(fresh.Text, "reply #1: two b") ||
		strings.Count(fresh.Text, "has since been deleted (thread "+threads["b"]+")") != 1 {
		t.Fatalf("the deleted chat's next message: %+v, want a new thread, told once", fresh)
	}
	if got := e.userTextsFor("two b"); len(got) != 1 || !slices.Equal(got[0], []string{"two b"}) {
		t.Fatalf("the model saw %q, want only the new message", got)
	}
	again := c.send("b", "three b")
	if again.ThreadID != fresh.ThreadID || strings.Contains(again.Text, "deleted") {
		t.Fatalf("the message after: %+v, want the new thread and no notice", again)
	}
	if !hasLine(e.archiveLines(), retention.EventTold, "b", threads["b"]) {
		t.Error("no told line")
	}
	f := scrapeMetrics(t, d.ready.Daemon.MetricsListen, "")
	for name, want := range map[string]float64{"codex_warm_threads_archived_total": 3, "codex_warm_threads_deleted_total": 2,
		"codex_warm_threads_unarchived_total": 1, "codex_warm_threads_gone_total": 1, "codex_warm_chats_archived": 1} {
		if v := f.MustValue(t, name, nil); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	d.stop(stopTimeout)

	// The daemon is down: the command takes the state dir's lock and a codex child of its own.
	e.ageChats(40, "live")
	code, out = e.archiveCmd("--idle-after", "30d", "--dry-run")
	if code != 0 || !strings.Contains(out, "would archive chat live thread "+threads["live"]) {
		t.Fatalf("dry run with the daemon down: exit %d: %s", code, out)
	}
	code, out = e.archiveCmd("--idle-after", "30d")
	if code != 0 || !strings.Contains(out, "1 archived, 0 deleted") {
		t.Fatalf("archive with the daemon down: exit %d: %s", code, out)
	}
	if _, ok := e.sessionsFile()["live"]; ok || e.rolloutIn(threads["live"]) != "archived_sessions" {
		t.Fatalf("with the daemon down the chat was not archived: %v, rollout under %q", e.sessionsFile(), e.rolloutIn(threads["live"]))
	}
	d = e.start("--spares", "0")
	c = newLocalClient(t, d)
	if r := c.send("live", "two live"); r.ThreadID != threads["live"] {
		t.Fatalf("after an offline archive the chat came back on %s, want %s", r.ThreadID, threads["live"])
	}
	if got := e.userTextsFor("two live"); len(got) != 1 || !slices.Equal(got[0], []string{"one live", "two live"}) {
		t.Fatalf("the model saw %q", got)
	}
	d.stop(stopTimeout)
}
