//go:build linux

package main

// A ChatGPT login shared by every warm child: the daemon holds it (codexauth), the real codex
// children run with an ephemeral credential store and ask the daemon for a new token on a 401.
// The model (mockmodel) accepts only the issuer's newest access token; the issuer
// (codexauthtest) rotates refresh tokens and refuses a reused one, as the real endpoint does.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
	"github.com/molecule-ai/codex-warm/internal/health"
)

// tokenE2E is an e2e environment whose codex is logged in with ChatGPT at a fake issuer.
type tokenE2E struct {
	*e2e
	is *codexauthtest.Issuer
}

func newTokenE2E(t *testing.T, ttl time.Duration) *tokenE2E {
	t.Helper()
	is, err := codexauthtest.New(codexauthtest.Config{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Close() })
	e := newE2E(t, e2eConfig{Local: true, Authorize: is.Accepts,
		Env: []string{codexauth.TokenURLEnv + "=" + is.URL()}})
	if err := e.mock.WriteCodexHomeChatGPT(e.codexHome); err != nil {
		t.Fatal(err)
	}
	if err := is.WriteAuthFile(e.codexHome); err != nil {
		t.Fatal(err)
	}
	return &tokenE2E{e2e: e, is: is}
}

// authTokens reads the refresh and access tokens of CODEX_HOME/auth.json.
func (e *tokenE2E) authTokens() (refresh, access string) {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.codexHome, codexauth.AuthFile))
	if err != nil {
		e.t.Fatal(err)
	}
	var doc struct {
		Tokens struct {
			Refresh string `json:"refresh_token"`
			Access  string `json:"access_token"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		e.t.Fatal(err)
	}
	return doc.Tokens.Refresh, doc.Tokens.Access
}

func (e *tokenE2E) tokenStatus(d *daemonProc) codexauth.Status {
	e.t.Helper()
	a := d.status().Daemon.CodexAuth
	if a == nil || a.Tokens == nil {
		e.t.Fatalf("status has no chatgpt_tokens: %+v", a)
	}
	return *a.Tokens
}

// The reproduction: four warm chats meet a refused token at the same moment. One token
// call serves them all, every turn completes, and auth.json holds the live refresh token. (With
// --chatgpt-tokens off, as codex does alone, the same setup made 4 calls and 3 chats were told
// to log in.)
func TestE2EChatGPTTokenRefreshedOnceForAllChats(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	d := e.start()
	c := newLocalClient(t, d)
	chats := []string{"a", "b", "c", "d"}
	for _, k := range chats {
		if r := c.send(k, "warm "+k); r.Status != "completed" {
			t.Fatalf("chat %s warm-up: %+v", k, r)
		}
	}
	if n := e.mock.Unauthorized(); n != 0 {
		t.Fatalf("%d requests refused before the revocation", n)
	}
	var stale string
	if reqs := e.mock.Requests(); len(reqs) > 0 {
		stale = reqs[len(reqs)-1].Bearer
	}
	if !e.is.Accepts(stale) {
		t.Fatalf("codex did not send the login's access token as the bearer (got %.20q)", stale)
	}
	e.is.Revoke()

	var wg sync.WaitGroup
	replies := make([]local.Reply, len(chats))
	for i, k := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = c.send(k, "after "+k)
		}()
	}
	wg.Wait()
	for i, r := range replies {
		if r.Status != "completed" || !strings.Contains(r.Text, "after "+chats[i]) {
			t.Errorf("chat %s: %+v, want the model's answer", chats[i], r)
		}
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Errorf("token endpoint: %d calls (%d with a spent token), want exactly 1", calls, reused)
	}
	if refresh, access := e.authTokens(); refresh != e.is.LiveRefreshToken() || !e.is.Accepts(access) {
		t.Errorf("auth.json does not hold the live tokens")
	}
	st := e.tokenStatus(d)
	if st.State != codexauth.StateValid || st.LastOutcome != codexauth.OutcomeRefreshed || st.LastRefresh.IsZero() {
		t.Errorf("status chatgpt_tokens = %+v", st)
	}
	if out := d.log(); strings.Contains(out, e.is.LiveRefreshToken()) || strings.Contains(out, e.is.AccessToken()) {
		t.Error("the daemon's log holds a token")
	}
	d.stop(stopTimeout)

	// A restart picks up the rotated login from auth.json and spends nothing.
	d = e.start()
	if r := newLocalClient(t, d).send("a", "after restart"); r.Status != "completed" {
		t.Errorf("after restart: %+v", r)
	}
	if calls := e.is.Calls(); calls != 1 {
		t.Errorf("%d token calls after the restart, want still 1", calls)
	}
	d.stop(stopTimeout)
}

// A token about to expire is refreshed ahead of time while the children are idle and pushed to
// each: the next message meets no 401 at all.
func TestE2EChatGPTTokenRefreshedAheadWhileIdle(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	// A login at the end of its life, due 5 s from now (5 minutes ahead of its expiry): once
	// the chat's child is warm, or at start-up on a slow machine; either way before the message
	// below.
	e.is.MintExpiring(time.Now().Add(5*time.Minute + 5*time.Second))
	if err := e.is.WriteAuthFile(e.codexHome); err != nil {
		t.Fatal(err)
	}
	d := e.start()
	c := newLocalClient(t, d)
	c.send("idle", "first") // the first message may meet either token
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := e.is.WaitCalls(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d.waitUntil("the refresh ahead completed", func() bool { return e.tokenStatus(d).LastOutcome == codexauth.OutcomeRefreshed })
	refused := e.mock.Unauthorized()
	if r := c.send("idle", "second"); r.Status != "completed" {
		t.Fatalf("after the refresh ahead: %+v", r)
	}
	if n := e.mock.Unauthorized(); n != refused {
		t.Errorf("%d requests refused after the refresh ahead: the idle child did not get the new token", n-refused)
	}
	if reqs := e.mock.Requests(); !e.is.Accepts(reqs[len(reqs)-1].Bearer) {
		t.Error("the last model request did not carry the refreshed token")
	}
	d.stop(stopTimeout)
}

// auth.json rotated by another process (the operator's codex, a second daemon) under the
// daemon: it takes the new tokens from the file and spends nothing.
func TestE2EChatGPTTokenRotatedByAnotherProcess(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	d := e.start()
	c := newLocalClient(t, d)
	c.send("x", "before")
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.codexHome, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	if r := c.send("x", "after"); r.Status != "completed" {
		t.Fatalf("after the rotation elsewhere: %+v", r)
	}
	if calls := e.is.Calls(); calls != 0 {
		t.Errorf("%d token calls, want 0 (the rotated tokens were in auth.json)", calls)
	}
	if st := e.tokenStatus(d); st.LastOutcome != codexauth.OutcomeAdopted {
		t.Errorf("status %+v, want outcome adopted", st)
	}
	d.stop(stopTimeout)
}

// The token endpoint is down, or slower than codex's 10 s: the message is answered honestly
// (no "log in again"), the login is not declared gone, and the next message works once the
// endpoint is back.
func TestE2EChatGPTTokenEndpointDownOrSlow(t *testing.T) {
	for _, fault := range []codexauthtest.Fault{codexauthtest.FaultDown, codexauthtest.FaultHang} {
		t.Run(fmt.Sprint(fault), func(t *testing.T) {
			e := newTokenE2E(t, time.Hour)
			d := e.start()
			c := newLocalClient(t, d)
			c.send("x", "before")
			e.is.Revoke()
			e.is.SetFault(fault)
			code, body, _ := c.post("x", `{"text": "during"}`)
			if strings.Contains(string(body), "codex login") || !strings.Contains(string(body), "could not renew its ChatGPT login") {
				t.Errorf("during the outage: HTTP %d %s, want the token-service text", code, body)
			}
			if st := e.tokenStatus(d); st.State != codexauth.StateFailing {
				t.Errorf("status %+v, want refresh_failing", st)
			}
			if code, body := getReady(t, d); code != http.StatusOK {
				t.Errorf("readyz during a token-service outage: %d %s, want ready (the login is not gone)", code, body)
			}
			e.is.Release()
			e.is.SetFault(codexauthtest.FaultNone)
			if r := c.send("x", "after"); r.Status != "completed" {
				t.Errorf("after the outage: %+v", r)
			}
			d.stop(stopTimeout)
		})
	}
}

// A refresh refused for good (invalid_grant) with nothing newer in auth.json: the chat is told
// to have an operator log in, later messages are answered at once without a model request,
// status and readiness say so, and a new `codex login` brings it back without a restart.
func TestE2EChatGPTLoginGoneAndBack(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	d := e.start()
	c := newLocalClient(t, d)
	c.send("x", "before")
	e.is.Revoke()
	e.is.SetFault(codexauthtest.FaultInvalidGrant)
	code, body, _ := c.post("x", `{"text": "gone"}`)
	if code != http.StatusBadGateway || !strings.Contains(string(body), "codex login") {
		t.Errorf("refused refresh: HTTP %d %s, want 502 with the login hint", code, body)
	}
	requests := len(e.mock.Requests()) + e.mock.Unauthorized()
	calls := e.is.Calls()
	code, body, _ = c.post("y", `{"text": "at once"}`)
	if code != http.StatusBadGateway || !strings.Contains(string(body), "codex login") {
		t.Errorf("next message: HTTP %d %s, want 502 with the login hint", code, body)
	}
	if n := len(e.mock.Requests()) + e.mock.Unauthorized(); n != requests || e.is.Calls() != calls {
		t.Errorf("a message while the login is gone reached the model (%d) or the endpoint (%d)", n-requests, e.is.Calls()-calls)
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateGone {
		t.Errorf("status %+v, want login_gone", st)
	}
	if code, _ := getReady(t, d); code == http.StatusOK {
		t.Error("readyz ready while the login is gone")
	}
	_, out := runStatus(t, "--state-dir", e.stateDir)
	if !strings.Contains(out, "WARNING") || !strings.Contains(out, "codex login") {
		t.Errorf("status table lacks the login warning:\n%s", out)
	}

	// The operator logs codex in again.
	e.is.SetFault(codexauthtest.FaultNone)
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.codexHome, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	if r := c.send("x", "back"); r.Status != "completed" {
		t.Errorf("after a new login: %+v", r)
	}
	d.stop(stopTimeout)
}

// The endpoint spent the refresh token and its answer was lost. The token is in doubt and never
// sent again (before: the next refresh sent it again, was refused as reused, and the login was
// gone): the chat is told an operator must log in, status says refresh_uncertain, no call reuses
// the token, and a new login brings it back.
func TestE2EChatGPTTokenAnswerLost(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	// No spare: a replacement spare opening its websocket at thread/start with the revoked
	// token would ask for the refresh whose answer is lost, before chat x's turn does.
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	c.send("x", "before")
	e.is.Revoke()
	e.is.SetFault(codexauthtest.FaultLoseAnswer)
	if code, body, _ := c.post("x", `{"text": "lost"}`); code != http.StatusBadGateway || !strings.Contains(string(body), "codex login") {
		t.Errorf("lost answer: HTTP %d %s, want 502 with the login hint", code, body)
	}
	e.is.SetFault(codexauthtest.FaultNone)
	code, body, _ := c.post("x", `{"text": "then"}`)
	if code != http.StatusBadGateway || !strings.Contains(string(body), "codex login") {
		t.Errorf("after the lost answer: HTTP %d %s, want 502 with the login hint", code, body)
	}
	if calls, r := e.is.Calls(), e.is.Reused(); calls != 1 || r != 0 {
		t.Errorf("%d token calls, %d with the spent token; want 1 and 0", calls, r)
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateUncertain {
		t.Errorf("status %+v, want refresh_uncertain", st)
	}
	_, out := runStatus(t, "--state-dir", e.stateDir)
	if !strings.Contains(out, "refresh_uncertain") || !strings.Contains(out, "codex login") {
		t.Errorf("status table lacks the doubt:\n%s", out)
	}
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.codexHome, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	if r := c.send("x", "back"); r.Status != "completed" {
		t.Errorf("after a new login: %+v", r)
	}
	d.stop(stopTimeout)
}

// getReady asks the local inbox's /readyz.
func getReady(t *testing.T, d *daemonProc) (int, string) {
	t.Helper()
	var rep health.Report
	code := getJSON(t, "http://"+d.ready.Daemon.Listen+"/readyz", &rep)
	return code, rep.Reason
}
