package local

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/chatfiles"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// fileAnswerer runs a turn that sends the files its message names ("SEND a.txt b.csv") with
// send_file, as codex's agent would, then ends the turn as end says.
type fileAnswerer struct {
	end func(key string) (supervisor.Reply, error)

	mu      sync.Mutex
	answers []appserver.ToolResult // what send_file told the model, in order
}

func (a *fileAnswerer) SubmitInput(ctx context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	if rest, ok := strings.CutPrefix(in.Text, "SEND "); ok {
		for _, p := range strings.Fields(rest) {
			args, _ := json.Marshal(map[string]string{"path": p})
			res := in.CallTool(ctx, appserver.ToolCall{Tool: chatfiles.ToolName, Arguments: args})
			a.mu.Lock()
			a.answers = append(a.answers, res)
			a.mu.Unlock()
		}
	}
	return a.end(key)
}

// accepted counts the send_file calls the model was told will be sent.
func (a *fileAnswerer) accepted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.answers {
		if r.OK {
			n++
		}
	}
	return n
}

// postFiles runs one message of chat k whose turn sends report.txt, missing.txt (not in the
// chat's folder: refused) and data.csv, and ends as end says; it returns the answer's status
// and body, and the number of files the model was told will be sent.
func postFiles(t *testing.T, end func(key string) (supervisor.Reply, error)) (int, []byte, int) {
	t.Helper()
	work := t.TempDir()
	dir := chatfiles.Folder(work, "k")
	must(t, os.MkdirAll(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "report.txt"), []byte("total: 42\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n1,2\n"), 0o600))
	a := &fileAnswerer{end: end}
	h, err := New(Config{Answerer: a, WorkDir: work})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v1/chats/k/messages", "application/json",
		strings.NewReader(`{"text":"SEND report.txt missing.txt data.csv"}`))
	must(t, err)
	defer resp.Body.Close()
	var raw json.RawMessage
	must(t, json.NewDecoder(resp.Body).Decode(&raw))
	return resp.StatusCode, raw, a.accepted()
}

// A turn the chat stopped with /stop sends none of its files: the stopped answer names them
// as not sent and still says why the refused one did not go.
func TestStoppedTurnSendsNoFiles(t *testing.T) {
	t.Parallel()
	status, raw, accepted := postFiles(t, func(key string) (supervisor.Reply, error) {
		return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Text: "half a report"},
			errors.Join(errors.New("chat "+key), supervisor.ErrStopped)
	})
	var r Reply
	must(t, json.Unmarshal(raw, &r))
	if status != http.StatusOK || r.Status != StatusStopped || accepted != 2 {
		t.Fatalf("HTTP %d %s after %d files accepted; want 200 stopped after 2", status, raw, accepted)
	}
	if len(r.Files) != 0 {
		t.Errorf("files %v, want none: the turn was stopped", r.Files)
	}
	for _, want := range []string{
		"stopped. What codex had written so far:\n\nhalf a report",
		"[missing.txt not sent: ",
		"[report.txt, data.csv not sent: the turn was stopped]",
	} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("text %q\nwant it to hold %q", r.Text, want)
		}
	}
}
