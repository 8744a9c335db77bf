//go:build linux

package main

// A ChatGPT login the Molecule platform owns (issue 26): the org's CODEX_AUTH_JSON, rotated by
// the platform alone (workspace-server/internal/codexauth/refresher.go), reaches the workspace in
// its environment, in its platform secrets and in the auth.json the template syncs. The daemon
// must take its tokens from there and never spend the org's single-use refresh token. The fake
// token endpoint (codexauthtest) counts every call and refuses a reused refresh token; the
// platform's own rotation spends the token there without counting as a call (RotateElsewhere).

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
	"github.com/molecule-ai/codex-warm/internal/metrics/metricstest"
)

// platformLoginE2E is a Molecule workspace whose ChatGPT login the platform owns.
type platformLoginE2E struct {
	*e2e
	is   *codexauthtest.Issuer
	seed string // the CODEX_AUTH_JSON the workspace was started with
}

func newPlatformLoginE2E(t *testing.T) *platformLoginE2E {
	t.Helper()
	return newPlatformLoginE2EWith(t, e2eConfig{})
}

// newPlatformLoginE2EWith is newPlatformLoginE2E with cfg's script.
func newPlatformLoginE2EWith(t *testing.T, cfg e2eConfig) *platformLoginE2E {
	t.Helper()
	is, err := codexauthtest.New(codexauthtest.Config{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Close() })
	seed := string(is.AuthJSON())
	cfg.Authorize = is.Accepts
	cfg.Env = append(cfg.Env, codexauth.TokenURLEnv+"="+is.URL(), "CODEX_AUTH_JSON="+seed)
	e := newE2E(t, cfg)
	if err := e.mock.WriteCodexHomeChatGPT(e.codexHome); err != nil {
		t.Fatal(err)
	}
	// The template's start.sh and its hourly sync write the platform's blob to auth.json.
	if err := os.WriteFile(filepath.Join(e.codexHome, codexauth.AuthFile), []byte(seed), 0o600); err != nil {
		t.Fatal(err)
	}
	e.plat.SetSecret(molecule.CodexAuthSecret, seed)
	return &platformLoginE2E{e2e: e, is: is, seed: seed}
}

// rotate is the platform's refresher renewing the org's login: it spends the refresh token at
// the token endpoint and stores the rotated blob in the secrets (not in auth.json: the hourly
// sync has not run yet). The old access token is refused by the model from now on.
func (e *platformLoginE2E) rotate() {
	access, refresh := e.is.RotateElsewhere()
	e.plat.SetSecret(molecule.CodexAuthSecret, string(codexauthtest.AuthDoc(e.is.IDToken(), access, refresh, "acct-test")))
}

// send enqueues a canvas message and waits for its reply.
func (e *platformLoginE2E) send(d *daemonProc, text string) string {
	e.t.Helper()
	before := len(e.plat.Notifies())
	e.plat.Enqueue(moleculetest.CanvasMessage(text))
	d.waitPlatform("the reply to "+text, func() bool { return len(e.plat.Notifies()) > before })
	return e.plat.Notifies()[before].Message
}

// checkChildEnv fails the test when a codex child of d holds the org's login in its
// environment.
func (e *platformLoginE2E) checkChildEnv(d *daemonProc) {
	e.t.Helper()
	children := d.status().Snapshot.Children
	looked := 0
	for _, c := range children {
		if c.PID == 0 {
			continue // a spare still starting: no process yet (seen under load)
		}
		looked++
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.PID))
		if err != nil {
			e.t.Fatalf("child %d (%q): %v", c.PID, c.ChatKey, err)
		}
		for _, kv := range bytes.Split(environ, []byte{0}) {
			name, _, _ := strings.Cut(string(kv), "=")
			for _, secret := range platformLoginEnv {
				if name == secret {
					e.t.Errorf("child %d (%q) has %s in its environment", c.PID, c.ChatKey, name)
				}
			}
		}
		if bytes.Contains(environ, []byte(e.is.LiveRefreshToken())) {
			e.t.Errorf("child %d (%q) holds the org's refresh token in its environment", c.PID, c.ChatKey)
		}
	}
	if looked == 0 {
		e.t.Fatalf("no running codex child to look at among %d", len(children))
	}
}

// The platform renews the org's login mid-conversation: the chat's child meets a 401, the
// daemon answers its refresh request with the platform's current token (read again from the
// secrets), the chat goes on, and the token endpoint is never called. A refused token the
// platform has not renewed yet is told to the chat as such, still without a token call.
// Before the fix: 1 token call, refused as reused (the platform had rotated the token), then
// "codex is not logged in" for every message; 0 reads of the platform's secrets.
func TestE2EPlatformLoginRenewedMidConversation(t *testing.T) {
	t.Parallel()
	e := newPlatformLoginE2E(t)
	d := e.start("--metrics-listen", "127.0.0.1:0")
	if got := e.send(d, "first"); got != "reply #1: first" {
		t.Fatalf("first reply %q", got)
	}
	e.checkChildEnv(d)

	e.rotate()
	refused := e.mock.Unauthorized()
	if got := e.send(d, "after the platform renewed"); !strings.Contains(got, "after the platform renewed") {
		t.Fatalf("after the platform's rotation: %q, want the model's answer", got)
	}
	if e.mock.Unauthorized() == refused {
		t.Error("the child never met the refused token: the test did not exercise its refresh request")
	}
	if reqs := e.mock.Requests(); !e.is.Accepts(reqs[len(reqs)-1].Bearer) {
		t.Error("the last model request did not carry the platform's renewed token")
	}

	// The model refuses the token and the platform has nothing newer yet.
	e.is.Revoke()
	if got := e.send(d, "not renewed yet"); !strings.Contains(got, "belongs to the platform") || strings.Contains(got, "codex login") {
		t.Errorf("with the platform's token refused: %q, want the not-renewed-yet text", got)
	}
	e.rotate()
	if got := e.send(d, "renewed again"); !strings.Contains(got, "renewed again") {
		t.Errorf("after the second rotation: %q", got)
	}

	if calls := e.is.Calls(); calls != 0 {
		t.Errorf("the daemon called the token endpoint %d times; a login the platform owns is never refreshed", calls)
	}
	if n := e.plat.CountCalls(moleculetest.RouteSecrets, http.StatusOK); n < 3 {
		t.Errorf("%d reads of the platform's secrets, want one at start and one per refused token", n)
	}
	for _, c := range e.plat.CallsTo(moleculetest.RouteSecrets) {
		if c.Header.Get("Authorization") != "Bearer "+e.plat.Token() {
			t.Errorf("secrets read without the workspace token: %v", c.Header)
		}
	}
	e.checkChildEnv(d)
	st := chatgptStatus(t, d)
	if st.Owner != codexauth.OwnerPlatform || st.Source != "platform secrets" || st.LastOutcome != codexauth.OutcomeAdopted {
		t.Errorf("status chatgpt_tokens = %+v, want owner platform, source platform secrets, adopted", st)
	}
	if a := d.status().Daemon.CodexAuth; a.LoginOwner != codexauth.OwnerPlatform {
		t.Errorf("status login_owner %q, want platform", a.LoginOwner)
	}
	_, out := runStatus(t, "--state-dir", e.stateDir)
	if !strings.Contains(out, "login owned by the platform") || !strings.Contains(out, "never refreshed by the daemon") {
		t.Errorf("status table does not say the platform owns the login:\n%s", out)
	}
	f := scrapeMetrics(t, d.ready.Daemon.MetricsListen, "")
	if v := f.MustValue(t, "codex_warm_chatgpt_login_owner", metricstest.Labels{"owner": "platform"}); v != 1 {
		t.Errorf("chatgpt_login_owner{platform} = %v, want 1", v)
	}
	if v, _ := f.Value("codex_warm_chatgpt_token_refreshes_total", metricstest.Labels{"outcome": codexauth.OutcomeNotRenewed}); v < 1 {
		t.Errorf("chatgpt_token_refreshes_total{not_renewed} = %v, want at least 1", v)
	}
	if out := d.log(); strings.Contains(out, e.is.LiveRefreshToken()) || strings.Contains(out, e.is.AccessToken()) {
		t.Error("the daemon's log holds a token")
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// The platform renews the login while the chat is idle: the daemon's periodic read picks it up
// and hands it to the live children, so the next message meets no 401 at all.
func TestE2EPlatformLoginPushedWhileIdle(t *testing.T) {
	t.Parallel()
	e := newPlatformLoginE2E(t)
	d := e.start("--chatgpt-platform-check", "100ms")
	if got := e.send(d, "first"); got != "reply #1: first" {
		t.Fatalf("first reply %q", got)
	}
	e.rotate()
	d.waitUntil("the daemon adopted the platform's renewed login", func() bool {
		st := chatgptStatus(t, d)
		return st.LastOutcome == codexauth.OutcomeAdopted
	})
	refused := e.mock.Unauthorized()
	if got := e.send(d, "second"); !strings.Contains(got, "second") {
		t.Fatalf("second reply %q", got)
	}
	if n := e.mock.Unauthorized(); n != refused {
		t.Errorf("%d model requests refused after the platform's login was pushed", n-refused)
	}
	if calls := e.is.Calls(); calls != 0 {
		t.Errorf("%d token endpoint calls, want 0", calls)
	}
	d.stop(stopTimeout)
}

// chatgptStatus is the daemon's chatgpt_tokens status.
func chatgptStatus(t *testing.T, d *daemonProc) codexauth.Status {
	t.Helper()
	a := d.status().Daemon.CodexAuth
	if a == nil || a.Tokens == nil {
		t.Fatalf("status has no chatgpt_tokens: %+v", a)
	}
	return *a.Tokens
}
