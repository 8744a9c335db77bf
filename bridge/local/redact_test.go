package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/internal/secretset"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Every answer of the inbox passes the secret set, whoever built its text: a completed turn's
// reply, a failed turn's error, a refusal, and every step and the reply of an event stream. A
// secret the set learns after the inbox started (a rotated login) is caught too, and so is one
// with characters JSON escapes.
func TestAnswersRedacted(t *testing.T) {
	t.Parallel()
	set := secretset.New()
	set.Add(secretset.Listeners, "inbox-token-0123456789")
	const late = "platform-login-learned-later"
	const escaped = `pass&word<with>"quotes"`
	quote := "inbox-token-0123456789 " + late + " " + escaped
	a := chattest.NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		switch text {
		case "fail":
			return supervisor.Reply{ChatKey: key, Status: "failed", Error: "tool printed " + quote}, nil
		case "broken":
			return supervisor.Reply{}, errors.New("codex said " + quote)
		}
		if p := supervisor.ProgressFrom(ctx); p != nil {
			p(supervisor.TurnProgress{Kind: supervisor.ProgressItemStarted, TurnID: "turn-1", ItemType: "commandExecution", Summary: "running cat " + quote})
			p(supervisor.TurnProgress{Kind: supervisor.ProgressDelta, TurnID: "turn-1", Delta: quote})
		}
		return supervisor.Reply{ChatKey: key, ThreadID: "t", TurnID: "turn-1", Status: "completed", Text: "here: " + quote}, nil
	})
	h, err := New(Config{Answerer: a, Secrets: set})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	set.Add(secretset.PlatformLogin, late)
	set.Add(secretset.WorkspaceSecrets, escaped)

	check := func(what, body string) {
		t.Helper()
		for _, s := range []string{"inbox-token", late, "pass&word", `pass\u0026word`, "quotes"} {
			if strings.Contains(body, s) {
				t.Errorf("%s carries %q: %s", what, s, body)
			}
		}
		if !strings.Contains(body, secretset.Redacted) {
			t.Errorf("%s shows no redaction: %s", what, body)
		}
	}
	for _, text := range []string{"hi", "fail", "broken"} {
		resp, err := http.Post(srv.URL+"/v1/chats/k/messages", "application/json", strings.NewReader(fmt.Sprintf(`{"text":%q}`, text)))
		must(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !json.Valid(b) {
			t.Fatalf("%s: not JSON: %s", text, b)
		}
		check(text, string(b))
	}
	resp := postStream(t, srv.URL+"/v1/chats/k/messages", "hi")
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	n := 0
	for {
		ev, err := readEvent(r)
		if err == io.EOF {
			break
		}
		must(t, err)
		b, _ := json.Marshal(ev.data)
		check("event "+ev.name, string(b))
		n++
	}
	if n != 3 {
		t.Errorf("%d events, want item_started, delta and reply", n)
	}
}
