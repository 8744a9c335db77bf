package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
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

// A turn that failed still sends the files it had taken, with the failure's note and the
// refusals, and so does one a newer message interrupted (--busy interrupt): nobody asked to drop
// its work. A failure answered with an error instead of a reply names them as not sent.
func TestFailedTurnSendsItsFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		end    func(key string) (supervisor.Reply, error)
		status int
		note   string // in the answer's text (or error)
		files  bool   // the answer carries the two files; else it names them as not sent
	}{
		{"turn failed", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Status: "failed", Error: "model 500"}, nil
		}, http.StatusOK, "codex failed (status failed): model 500", true},
		{"superseded", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Text: "half a report"},
				errors.Join(errors.New("chat "+key), supervisor.ErrSuperseded)
		}, http.StatusOK, "interrupted by a newer message. What codex had written so far:\n\nhalf a report", true},
		{"turn deadline", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu", Text: "half a report"},
				&supervisor.WatchdogError{ChatKey: key, Watchdog: supervisor.WatchdogTurn, Err: errors.New("deadline")}
		}, http.StatusGatewayTimeout, "half a report\n\n[codex ran past the time limit", false},
		{"child exited", func(key string) (supervisor.Reply, error) {
			return supervisor.Reply{ChatKey: key, ThreadID: "th", TurnID: "tu"}, fmt.Errorf("turn: %w", appserver.ErrChildExited)
		}, http.StatusInternalServerError, "the codex session for this chat ended unexpectedly", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, raw, accepted := postFiles(t, tc.end)
			var r Reply
			var er ErrorReply
			must(t, json.Unmarshal(raw, &r))
			must(t, json.Unmarshal(raw, &er))
			text := r.Text
			if status != http.StatusOK {
				text = er.Error
			}
			if status != tc.status || accepted != 2 {
				t.Fatalf("HTTP %d %s after %d files accepted; want %d after 2", status, raw, accepted, tc.status)
			}
			var names []string
			for _, f := range r.Files {
				names = append(names, f.Name)
			}
			wants := []string{tc.note, "[missing.txt not sent: "}
			if tc.files {
				if strings.Join(names, " ") != "report.txt data.csv" {
					t.Errorf("files %q, want report.txt and data.csv", names)
				}
				if strings.Contains(text, "report.txt") {
					t.Errorf("text %q names a file that went", text)
				}
			} else {
				wants = append(wants, "[report.txt, data.csv not sent: ")
			}
			for _, want := range wants {
				if !strings.Contains(text, want) {
					t.Errorf("text %q\nwant it to hold %q", text, want)
				}
			}
		})
	}
}
