//go:build linux

package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

// A ChatGPT token refresh whose answer has not come when a reload starts: the endpoint has
// rotated the tokens (the refresh token is spent) and answers late. The reload waits for the
// answer (within --drain-timeout) and holds new refreshes until its exec, so the answer
// becomes the login in auth.json, which the new image reads: the refresh token is presented
// once, never again by the new image, and the new image's children use the new tokens.
func TestE2EReloadTokenRefreshInFlight(t *testing.T) {
	t.Parallel()
	e := newTokenE2E(t, time.Hour)
	installReloadable(t, e.e2e)
	d := e.start("--spares", "0", "--drain-timeout", "60s")
	c := newLocalClient(t, d)
	if r := c.send("x", "before"); r.Status != "completed" {
		t.Fatalf("before: %+v", r)
	}
	e.is.Revoke()
	e.is.SetFault(codexauthtest.FaultLate)
	if _, body, _ := c.post("x", `{"text": "late"}`); !strings.Contains(string(body), "could not renew") {
		t.Fatalf("late answer: %s, want the renewal-failed text", body)
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateFailing || !strings.Contains(st.LastError, "awaited") {
		t.Fatalf("status while the answer is awaited: %+v", st)
	}
	installBin(t, e.bin)
	d.signal(syscall.SIGHUP)
	d.waitUntil("the reload to hold the login", func() bool {
		return len(d.logsWith("reload: holding the ChatGPT login (a refresh in flight is awaited)")) == 1
	})
	e.is.Release()
	d.waitUntil("the new image to take over", func() bool {
		return len(d.logsWith("reload: took over from the previous image")) == 1
	})
	e.is.SetFault(codexauthtest.FaultNone)
	if r := c.send("x", "after"); r.Status != "completed" || !strings.Contains(r.Text, "after") {
		t.Fatalf("after the reload: %+v\n%s", r, d.logTail(3000))
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Fatalf("%d token calls, %d presented a spent refresh token; want 1 and 0\n%s", calls, reused, d.logTail(3000))
	}
	if refresh, access := e.authTokens(); refresh != e.is.LiveRefreshToken() || !e.is.Accepts(access) {
		t.Fatal("auth.json does not hold the late answer's tokens")
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateValid {
		t.Fatalf("the new image's login: %+v", st)
	}
	if doc := d.status(); doc.Daemon.PID != d.pid || doc.Daemon.Reloads != 1 {
		t.Fatalf("pid %d (want %d), reloads %d", doc.Daemon.PID, d.pid, doc.Daemon.Reloads)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// A refresh token in doubt (the endpoint spent it and its answer was lost) stays in doubt
// across a reload, though auth.json still holds it: the new image never sends it again, tells
// the chat an operator must log in, and takes a new login when one is written.
func TestE2EReloadTokenInDoubtStaysInDoubt(t *testing.T) {
	t.Parallel()
	e := newTokenE2E(t, time.Hour)
	installReloadable(t, e.e2e)
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	if r := c.send("x", "before"); r.Status != "completed" {
		t.Fatalf("before: %+v", r)
	}
	e.is.Revoke()
	e.is.SetFault(codexauthtest.FaultLoseAnswer)
	if code, body, _ := c.post("x", `{"text": "lost"}`); code != http.StatusBadGateway || !strings.Contains(string(body), "codex login") {
		t.Fatalf("lost answer: HTTP %d %s, want 502 with the login hint", code, body)
	}
	e.is.SetFault(codexauthtest.FaultNone)
	installBin(t, e.bin)
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateUncertain {
		t.Fatalf("the new image's login: %+v, want refresh_uncertain", st)
	}
	if code, body, _ := c.post("x", `{"text": "then"}`); code != http.StatusBadGateway || !strings.Contains(string(body), "codex login") {
		t.Fatalf("after the reload: HTTP %d %s, want 502 with the login hint", code, body)
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Fatalf("%d token calls, %d with the spent token; want 1 and 0", calls, reused)
	}
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.codexHome, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	if r := c.send("x", "back"); r.Status != "completed" {
		t.Fatalf("after a new login: %+v", r)
	}
	d.stop(stopTimeout)
	d.checkLog()
}
