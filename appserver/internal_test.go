package appserver

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

func TestResolveDecision(t *testing.T) {
	codexOffer := []string{"accept", "cancel"} // what 0.169 lists (plus an object decision)
	for _, tc := range []struct {
		want    string
		offered []string
		got     string
	}{
		{"", nil, "decline"},
		{"decline", nil, "decline"},
		{"accept", nil, "accept"},
		{"decline", codexOffer, "decline"}, // not listed, but accepted and keeps the turn going
		{"accept", codexOffer, "accept"},
		{"accept", []string{"decline", "cancel"}, "decline"}, // never accept what is not offered
		{"acceptForSession", codexOffer, "accept"},           // narrower is fine
		{"acceptForSession", []string{"cancel"}, "decline"},
		{"cancel", codexOffer, "cancel"},
	} {
		if got := resolveDecision(tc.want, tc.offered); got != tc.got {
			t.Errorf("resolveDecision(%q, %q) = %q, want %q", tc.want, tc.offered, got, tc.got)
		}
	}
}

func TestPolicyAnswers(t *testing.T) {
	raw := func(s string) *json.RawMessage { m := json.RawMessage(s); return &m }
	offer := raw(`{"availableDecisions":["accept",{"acceptWithExecpolicyAmendment":{"execpolicy_amendment":["ls"]}},"cancel"]}`)
	for _, tc := range []struct {
		policy Policy
		method string
		params *json.RawMessage
		want   string
	}{
		{DefaultPolicy(), protocol.RequestCommandApproval, offer, `{"decision":"decline"}`},
		{AcceptPolicy(), protocol.RequestCommandApproval, offer, `{"decision":"accept"}`},
		{AcceptPolicy(), protocol.RequestCommandApproval, raw(`{"availableDecisions":["decline"]}`), `{"decision":"decline"}`},
		{Policy{}, protocol.RequestFileChangeApproval, nil, `{"decision":"decline"}`},
		{AcceptPolicy(), protocol.RequestFileChangeApproval, raw(`{}`), `{"decision":"accept"}`},
		{AcceptPolicy(), protocol.RequestPermissionsApproval, raw(`{}`), `{"permissions":{},"scope":"turn"}`},
		{AcceptPolicy(), protocol.RequestMCPElicitation, raw(`{}`), `{"action":"decline","content":null,"_meta":null}`},
		{AcceptPolicy(), protocol.RequestToolUserInput, raw(`{}`), `{"answers":{}}`},
		{Policy{}, legacyExecApproval, raw(`{}`), `{"decision":{"denied":{"rejection":"declined by the codex-warm approval policy (execCommandApproval)"}}}`},
		{AcceptPolicy(), legacyPatchApproval, raw(`{}`), `{"decision":"approved"}`},
	} {
		res, rpcErr := tc.policy.answer(tc.method, tc.params)
		if rpcErr != nil {
			t.Errorf("%s: error %v", tc.method, rpcErr)
			continue
		}
		b, _ := json.Marshal(res)
		if string(b) != tc.want {
			t.Errorf("%+v %s: %s, want %s", tc.policy, tc.method, b, tc.want)
		}
	}
	if _, rpcErr := DefaultPolicy().answer("item/tool/call", nil); rpcErr == nil || rpcErr.Code != protocol.CodeMethodNotFound {
		t.Errorf("unknown request: %v, want -32601", rpcErr)
	}
}

func TestAuthPattern(t *testing.T) {
	for text, want := range map[string]bool{
		"unexpected status 401 Unauthorized":                         true,
		"token refresh failed: invalid_grant":                        true,
		"Your refresh token has expired. Please log in again.":       true,
		"Not logged in. Run codex login":                             true,
		"We're currently experiencing high demand":                   false,
		"stream disconnected before completion: error sending req":   false,
		"listening on 127.0.0.1:14015":                               false,
		"Model metadata for `mock-model` not found. Defaulting to …": false,
	} {
		if got := authLine(text) != ""; got != want {
			t.Errorf("authLine(%q) matched = %v, want %v", text, got, want)
		}
	}
	tail := "INFO boot\nERROR codex_core::auth: failed to refresh token: invalid_grant\nINFO more\n"
	if got := authLine(tail); got != "ERROR codex_core::auth: failed to refresh token: invalid_grant" {
		t.Errorf("authLine = %q", got)
	}
	err := classifyExit(&ExitError{PID: 1, Status: "exit status 1", StderrTail: tail})
	var ae *AuthError
	if !errors.As(err, &ae) || !errors.Is(err, ErrChildExited) || !strings.Contains(err.Error(), "codex login") {
		t.Errorf("classifyExit = %v", err)
	}
}

// pipeStream returns a lineStream reading what write writes. Each write runs in a goroutine of
// its own (a pipe holds only 64 KiB, and a write may stay blocked once the stream stopped
// reading); the test's cleanup closes the pipes, which ends a blocked write, and waits for them.
func pipeStream(t *testing.T, maxLine int) (s *lineStream, write func(data string, close bool)) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s = newLineStream(inR, outW, maxLine, time.Second)
	var writers sync.WaitGroup
	t.Cleanup(func() {
		_ = s.Close()
		_ = inW.Close()
		_ = outR.Close()
		writers.Wait()
	})
	return s, func(data string, close bool) {
		writers.Go(func() {
			_, _ = io.WriteString(inW, data)
			if close {
				_ = inW.Close()
			}
		})
	}
}

func TestLineStreamLimitsAndErrors(t *testing.T) {
	t.Run("lines up to the limit", func(t *testing.T) {
		s, write := pipeStream(t, 100)
		write("\n{\"a\":1}\n  \n"+`{"b":"`+strings.Repeat("y", 90)+"\"}\n{\"c\":3}", true)
		var got []map[string]any
		for {
			var v map[string]any
			err := s.ReadObject(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if len(got) != 3 || got[2]["c"] != float64(3) {
			t.Errorf("objects %v: blank lines skipped, last line without newline kept", got)
		}
	})
	t.Run("long line in one buffer", func(t *testing.T) {
		s, write := pipeStream(t, 10)
		write(`{"a":"0123456789"}`+"\n", false)
		var v any
		if err := s.ReadObject(&v); !errors.Is(err, ErrLineTooLong) || !errors.Is(err, ErrProtocol) {
			t.Errorf("error %v, want ErrLineTooLong", err)
		}
	})
	t.Run("long line across buffers", func(t *testing.T) {
		s, write := pipeStream(t, 100<<10)
		write(`{"a":"`+strings.Repeat("z", 200<<10)+"\"}\n", true)
		var v any
		if err := s.ReadObject(&v); !errors.Is(err, ErrLineTooLong) {
			t.Errorf("error %v, want ErrLineTooLong", err)
		}
	})
	t.Run("big line within limit across buffers", func(t *testing.T) {
		s, write := pipeStream(t, 1<<20)
		big := strings.Repeat("q", 300<<10)
		write(`{"a":"`+big+"\"}\n", false)
		var v map[string]string
		if err := s.ReadObject(&v); err != nil || v["a"] != big {
			t.Errorf("error %v, len %d", err, len(v["a"]))
		}
	})
	t.Run("garbage", func(t *testing.T) {
		s, write := pipeStream(t, 100)
		var ended error
		s.onReadEnd = func(err error) { ended = err }
		write("hello world\n", false)
		var v any
		err := s.ReadObject(&v)
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "hello world") || ended != err {
			t.Errorf("error %v (read end %v)", err, ended)
		}
	})
	t.Run("write", func(t *testing.T) {
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		s := newLineStream(inR, outW, 100, time.Second)
		defer func() { _ = s.Close(); _ = inW.Close(); _ = outR.Close() }()
		if err := s.WriteObject(map[string]int{"id": 0}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, _ := outR.Read(buf)
		if string(buf[:n]) != "{\"id\":0}\n" {
			t.Errorf("wrote %q", buf[:n])
		}
	})
	t.Run("stalled write times out", func(t *testing.T) {
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		s := newLineStream(inR, outW, 100, 100*time.Millisecond)
		var failed error
		s.onWriteErr = func(err error) { failed = err }
		defer func() { _ = s.Close(); _ = inW.Close(); _ = outR.Close() }()
		// Nobody reads outR: the pipe fills up and the write must give up.
		err := s.WriteObject(map[string]string{"x": strings.Repeat("w", 1<<20)})
		if !errors.Is(err, os.ErrDeadlineExceeded) || failed != err {
			t.Errorf("error %v (reported %v), want a deadline error", err, failed)
		}
	})
}

func TestInboundQueueOrderAndClose(t *testing.T) {
	var grew []int
	q := newInboundQueue(func(n int, _ int64) { grew = append(grew, n) })
	for i := range 3000 {
		q.push(inbound{turnID: string(rune('a' + i%26)), size: 1})
	}
	q.close()
	if q.push(inbound{}) {
		t.Error("push after close accepted")
	}
	for i := range 3000 {
		it, ok := q.pop()
		if !ok || it.turnID != string(rune('a'+i%26)) {
			t.Fatalf("item %d: %v %q", i, ok, it.turnID)
		}
	}
	if _, ok := q.pop(); ok {
		t.Error("pop after drain returned an item")
	}
	if len(grew) != 2 || grew[0] != 1024 || grew[1] != 2048 {
		t.Errorf("growth reports %v", grew)
	}
}

func TestResolveBinary(t *testing.T) {
	root := t.TempDir()
	nm := filepath.Join(root, "node_modules")
	pkg := filepath.Join(nm, "@openai", "codex")
	wrapper := filepath.Join(pkg, "bin", "codex.js")
	native := filepath.Join(nm, "@openai", platformPackage(), "vendor", targetTriple(), "bin", "codex")
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(wrapper, "#!/usr/bin/env node\nconsole.log('wrapper')\n", 0o755)
	write(native, "\x7fELF fake native binary", 0o755)
	dotBin := filepath.Join(nm, ".bin")
	if err := os.MkdirAll(dotBin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../@openai/codex/bin/codex.js", filepath.Join(dotBin, "codex")); err != nil {
		t.Fatal(err)
	}

	for name, hint := range map[string]string{
		"native":          native,
		"wrapper":         wrapper,
		"npm bin symlink": filepath.Join(dotBin, "codex"),
		"npm prefix dir":  root,
	} {
		got, err := ResolveBinary(hint)
		if err != nil || got != native {
			t.Errorf("%s: ResolveBinary(%q) = %q, %v; want %q", name, hint, got, err, native)
		}
	}

	t.Setenv("PATH", dotBin)
	if got, err := ResolveBinary(""); err != nil || got != native {
		t.Errorf("PATH lookup: %q, %v; want the native binary behind the wrapper", got, err)
	}

	// A wrapper whose native package is missing is an error naming where it looked; it never
	// falls back to the wrapper.
	if err := os.Remove(native); err != nil {
		t.Fatal(err)
	}
	_, err := ResolveBinary(wrapper)
	if err == nil || !strings.Contains(err.Error(), native) {
		t.Errorf("missing native: %v, want an error naming %s", err, native)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := ResolveBinary(""); !errors.Is(err, ErrNoCodex) || !strings.Contains(err.Error(), "PATH") {
		t.Errorf("no codex in PATH: %v", err)
	}
	if _, err := ResolveBinary(filepath.Join(root, "nope")); err == nil {
		t.Error("missing path resolved")
	}
	plain := filepath.Join(root, "not-executable")
	write(plain, "data", 0o644)
	if _, err := ResolveBinary(plain); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("non-executable: %v", err)
	}
}

// An auth failure is decided by codexErrorInfo where codex names the cause; codex's own texts
// count only where it does not ("other", or no codexErrorInfo at all).
func TestAuthMessageFollowsCodexErrorInfo(t *testing.T) {
	const stderrAuth = "INFO boot\nERROR codex_core::auth: failed to refresh token: invalid_grant\n"
	te := func(msg, info string) *protocol.TurnError {
		e := &protocol.TurnError{Message: msg}
		if info != "" {
			e.CodexErrorInfo = json.RawMessage(info)
		}
		return e
	}
	for _, tc := range []struct {
		name   string
		te     *protocol.TurnError
		stderr string
		auth   bool
	}{
		{"unauthorized, whatever the message", te("stream error", `"unauthorized"`), "", true},
		{"401 on the response stream", te("Error while reading the server response", `{"responseStreamConnectionFailed":{"httpStatusCode":401}}`), "", true},
		{"401 after retries", te("exceeded retry limit", `{"responseTooManyFailedAttempts":{"httpStatusCode":401}}`), "", true},
		{"401 on connect", te("Connection failed", `{"httpConnectionFailed":{"httpStatusCode":401}}`), "", true},
		{"401 mid-stream", te("stream disconnected", `{"responseStreamDisconnected":{"httpStatusCode":401}}`), "", true},
		{"503 on connect", te("Connection failed: 401 retries", `{"httpConnectionFailed":{"httpStatusCode":503}}`), "", false},
		{"http kind without a status", te("stream disconnected", `{"responseStreamDisconnected":{"httpStatusCode":null}}`), stderrAuth, false},
		{"a typed cause that is not auth wins over the text", te("Please log in again", `"internalServerError"`), stderrAuth, false},
		{"usage limit", te("You've hit your usage limit.", `"usageLimitExceeded"`), "", false},
		{"other: codex's unexpected-status message", te("unexpected status 401 Unauthorized: Missing bearer", `"other"`), "", true},
		{"other without auth text", te("We're currently experiencing high demand", `"other"`), "", false},
		{"no codexErrorInfo: the message", te("token refresh failed: invalid_grant", ""), "", true},
		{"no codexErrorInfo: stderr during the turn", te("boom", ""), stderrAuth, true},
		{"no turn error: stderr", nil, stderrAuth, true},
		{"nothing", nil, "INFO boot\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := authMessage(tc.te, tc.stderr); (got != "") != tc.auth {
				t.Errorf("authMessage = %q, want auth %v", got, tc.auth)
			}
		})
	}
}
