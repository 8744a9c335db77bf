package appserver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/cannedmodel"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// firstTurn is what one real codex child left after its thread's first turn: the model request
// the mock recorded, the rollout's entries and CODEX_HOME's files.
type firstTurn struct {
	env     *realEnv
	thread  string
	request []byte
	rollout []string
	files   []string
}

// runFirstTurn starts a child in a fresh CODEX_HOME, starts a thread, warms it up when canned is
// not nil, and runs the thread's first turn. It checks that the warm-up reached only canned.
func runFirstTurn(t *testing.T, canned *cannedmodel.Server) firstTurn {
	t.Helper()
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, func(cfg *appserver.Config) {
		if canned != nil {
			cfg.WarmUpURL = canned.URL()
		}
	})
	ctx := ctxTimeout(t, time.Minute)
	opts := appserver.ThreadOptions{Cwd: e.cwd}
	id, err := c.StartThread(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if canned != nil {
		before := canned.Requests()
		if err := c.WarmUp(ctx, id, "chat-key", opts); err != nil {
			t.Fatalf("warm up: %v", err)
		}
		if n := e.mock.RequestCount(); n != 0 {
			t.Fatalf("the warm-up sent %d requests to the model; want 0", n)
		}
		if n := canned.Requests() - before; n != 1 {
			t.Fatalf("the canned responder answered %d requests in the warm-up; want 1", n)
		}
	}
	r, err := c.RunTurn(ctx, id, []protocol.UserInput{{Type: "text", Text: "hello"}}, appserver.TurnOptions{})
	if err != nil || r.Status != protocol.TurnCompleted {
		t.Fatalf("first turn: %v (status %q)", err, r.Status)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the mock recorded %d requests; want 1", len(reqs))
	}
	return firstTurn{env: e, thread: id, request: reqs[0].Raw, rollout: rolloutShape(t, e.home, id), files: homeFiles(t, e.home, id)}
}

// TestRealWarmUpChangesNothingSeen runs a thread's first turn on a warmed child and on a cold
// one: the warm-up sends nothing to the model, the model's first request is the same (after
// normalising what differs between any two runs), the thread's rollout holds the same entries,
// and CODEX_HOME the same files but the name index.
func TestRealWarmUpChangesNothingSeen(t *testing.T) {
	canned, err := cannedmodel.New(cannedmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = canned.Close() })
	cold := runFirstTurn(t, nil)
	warm := runFirstTurn(t, canned)

	if a, b := normaliseRequest(t, cold), normaliseRequest(t, warm); a != b {
		t.Errorf("the first model request differs after the warm-up (a: cold, b: warm) %s", appservertest.FirstDifference(a, b))
	}
	if !slices.Equal(cold.rollout, warm.rollout) {
		t.Errorf("the thread's rollout differs after the warm-up:\ncold: %v\nwarm: %v", cold.rollout, warm.rollout)
	}
	// The one addition is the thread's name (thread/name/set): session_index.jsonl, which holds
	// this thread only.
	extra := []string{"session_index.jsonl", "session_index.jsonl.lock"}
	want := slices.Sorted(slices.Values(slices.Concat(cold.files, extra)))
	if !slices.Equal(want, warm.files) {
		t.Errorf("CODEX_HOME after the warm-up:\n got %v\nwant %v", warm.files, want)
	}
	index, err := os.ReadFile(filepath.Join(warm.env.home, "session_index.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(index)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], warm.thread) || !strings.Contains(lines[0], `"chat-key"`) {
		t.Errorf("session_index.jsonl = %q; want one line naming thread %s chat-key", index, warm.thread)
	}
}

// TestRealWarmUpWithoutResponder shows a warm-up that cannot reach its responder fails within
// its context and leaves the child usable.
func TestRealWarmUpWithoutResponder(t *testing.T) {
	canned, err := cannedmodel.New(cannedmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	url := canned.URL()
	if err := canned.Close(); err != nil {
		t.Fatal(err)
	}
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, func(cfg *appserver.Config) { cfg.WarmUpURL = url })
	ctx := ctxTimeout(t, time.Minute)
	id, err := c.StartThread(ctx, appserver.ThreadOptions{Cwd: e.cwd})
	if err != nil {
		t.Fatal(err)
	}
	wctx := ctxTimeout(t, 3*time.Second)
	if err := c.WarmUp(wctx, id, "chat-key", appserver.ThreadOptions{Cwd: e.cwd}); err == nil {
		t.Fatal("warm-up against a closed responder succeeded")
	}
	r, err := c.RunTurn(ctx, id, []protocol.UserInput{{Type: "text", Text: "hello"}}, appserver.TurnOptions{})
	if err != nil || r.Status != protocol.TurnCompleted {
		t.Fatalf("turn after a failed warm-up: %v (status %q)", err, r.Status)
	}
	if n := e.mock.RequestCount(); n != 1 {
		t.Fatalf("the mock recorded %d requests; want 1", n)
	}
}

// normaliseRequest is the first turn's request with its thread id and paths normalised
// (appservertest.NormaliseRequest says what else).
func normaliseRequest(t *testing.T, f firstTurn) string {
	t.Helper()
	s, err := appservertest.NormaliseRequest(f.request, map[string]string{
		f.thread: "<thread>", f.env.home: "<codex-home>", f.env.cwd: "<cwd>"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rolloutShape lists the thread's rollout entries as "type/payload.type".
func rolloutShape(t *testing.T, home, thread string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(home, "sessions", "*", "*", "*", "rollout-*-"+thread+".jsonl"))
	if err != nil || len(paths) != 1 {
		t.Fatalf("rollout of thread %s: %v %v", thread, paths, err)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var e struct {
			Type    string `json:"type"`
			Payload struct {
				Type string `json:"type"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("rollout line %q: %v", l, err)
		}
		out = append(out, e.Type+"/"+e.Payload.Type)
	}
	return out
}

// homeFiles lists CODEX_HOME's files, normalised (appservertest.HomeFiles).
func homeFiles(t *testing.T, home, thread string) []string {
	t.Helper()
	files, err := appservertest.HomeFiles(home, map[string]string{thread: "<thread>"})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRealWarmUpOfAWarmProcessOnlyNames opens a spare's thread in a child whose chat already
// ran a turn (a shared child): the process is warm, so the warm-up names the thread and runs no
// throwaway turn, which would hold the child's turn gate beside its chats' turns.
func TestRealWarmUpOfAWarmProcessOnlyNames(t *testing.T) {
	canned, err := cannedmodel.New(cannedmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = canned.Close() })
	e := newRealEnv(t, mockmodel.Config{})
	c := e.start(t, func(cfg *appserver.Config) { cfg.WarmUpURL = canned.URL() })
	ctx := ctxTimeout(t, time.Minute)
	opts := appserver.ThreadOptions{Cwd: e.cwd}
	first, err := c.StartThread(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WarmUp(ctx, first, "spare-1", opts); err != nil {
		t.Fatalf("warm up a cold process: %v", err)
	}
	if n := canned.Requests(); n != 1 {
		t.Fatalf("a cold process's warm-up reached the canned responder %d times; want 1", n)
	}
	r, err := c.RunTurn(ctx, first, []protocol.UserInput{{Type: "text", Text: "hello"}}, appserver.TurnOptions{})
	if err != nil || r.Status != protocol.TurnCompleted {
		t.Fatalf("chat turn: %v (status %v)", err, r)
	}
	second, err := c.StartThread(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WarmUp(ctx, second, "spare-2", opts); err != nil {
		t.Fatalf("warm up a second thread: %v", err)
	}
	if n := canned.Requests(); n != 1 {
		t.Errorf("the warm-up of a process that already ran a turn reached the canned responder (%d requests in all); want no new one", n)
	}
	if n := e.mock.RequestCount(); n != 1 {
		t.Errorf("the model saw %d requests; want the chat's one", n)
	}
	index, err := os.ReadFile(filepath.Join(e.home, "session_index.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(index), second) || !strings.Contains(string(index), `"spare-2"`) {
		t.Errorf("session_index.jsonl = %q; want thread %s named spare-2", index, second)
	}
}
