package codexauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

type env struct {
	t    *testing.T
	home string
	is   *codexauthtest.Issuer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	is, err := codexauthtest.New(codexauthtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Close() })
	e := &env{t: t, home: t.TempDir(), is: is}
	if err := is.WriteAuthFile(e.home); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) open(mod func(*codexauth.Config)) *codexauth.Manager {
	e.t.Helper()
	cfg := codexauth.Config{CodexHome: e.home, TokenURL: e.is.URL()}
	if mod != nil {
		mod(&cfg)
	}
	m, kind, err := codexauth.Open(cfg)
	if err != nil || m == nil || kind != codexauth.KindChatGPT {
		e.t.Fatalf("Open: %v, %v, %v", m, kind, err)
	}
	e.t.Cleanup(m.Close)
	return m
}

// authFile reads auth.json as a generic document.
func (e *env) authFile() map[string]any {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.home, codexauth.AuthFile))
	if err != nil {
		e.t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		e.t.Fatal(err)
	}
	return doc
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Children that meet a refused token together share one refresh: one token call, every child
// gets the new token, and auth.json holds the live refresh token with the rest of the file and
// its mode kept.
func TestConcurrentRefreshesShareOneCall(t *testing.T) {
	e := newEnv(t)
	// Fields codex may add, and a mode an operator chose, survive the write-back.
	doc := e.authFile()
	doc["future_field"] = "kept"
	data, _ := json.Marshal(doc)
	path := filepath.Join(e.home, codexauth.AuthFile)
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	var omu sync.Mutex
	m := e.open(func(c *codexauth.Config) {
		c.OnRefresh = func(o string) { omu.Lock(); outcomes = append(outcomes, o); omu.Unlock() }
	})
	stale := m.Login().AccessToken
	e.is.Revoke()

	const n = 8
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Refresh(ctxT(t), stale)
			if err != nil {
				t.Errorf("refresh %d: %v", i, err)
			}
			got[i] = l.AccessToken
		}()
	}
	wg.Wait()
	if c := e.is.Calls(); c != 1 {
		t.Errorf("%d token calls for %d children, want 1", c, n)
	}
	for i, a := range got {
		if !e.is.Accepts(a) {
			t.Errorf("child %d got a token the model refuses", i)
		}
	}
	doc = e.authFile()
	tokens, _ := doc["tokens"].(map[string]any)
	if tokens["refresh_token"] != e.is.LiveRefreshToken() || !e.is.Accepts(tokens["access_token"].(string)) {
		t.Errorf("auth.json tokens = %v, want the live ones", tokens)
	}
	if doc["future_field"] != "kept" || doc["auth_mode"] != "chatgpt" {
		t.Errorf("auth.json lost fields: %v", doc)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("auth.json mode %v (%v), want 0640 kept", fi.Mode().Perm(), err)
	}
	st := m.Status()
	if st.State != codexauth.StateValid || st.LastOutcome != codexauth.OutcomeRefreshed || st.LastRefresh.IsZero() || st.AccountID != "acct-test" {
		t.Errorf("status = %+v", st)
	}
	omu.Lock()
	defer omu.Unlock()
	if len(outcomes) != 1 || outcomes[0] != codexauth.OutcomeRefreshed {
		t.Errorf("outcomes counted = %v, want [refreshed]", outcomes)
	}

	// A child still holding the old token gets the new one at once.
	l, err := m.Refresh(ctxT(t), stale)
	if err != nil || !e.is.Accepts(l.AccessToken) || e.is.Calls() != 1 {
		t.Errorf("older token: %v, accepted %v, calls %d", err, e.is.Accepts(l.AccessToken), e.is.Calls())
	}
}

// Another process rotated the tokens and wrote auth.json: the daemon takes them from there and
// spends nothing.
func TestRotationByAnotherProcessIsAdopted(t *testing.T) {
	e := newEnv(t)
	m := e.open(nil)
	kicked := make(chan struct{}, 1)
	defer m.Subscribe(func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	})()
	stale := m.Login().AccessToken
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.home, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	l, err := m.Refresh(ctxT(t), stale)
	if err != nil || l.AccessToken != access {
		t.Fatalf("refresh: %v; got the adopted token: %v", err, l.AccessToken == access)
	}
	if c := e.is.Calls(); c != 0 {
		t.Errorf("%d token calls, want 0", c)
	}
	select {
	case <-kicked:
	default:
		t.Error("subscribers were not told of the adopted token")
	}
	if st := m.Status(); st.LastOutcome != codexauth.OutcomeAdopted {
		t.Errorf("status %+v, want outcome adopted", st)
	}
}

// A refresh token spent elsewhere whose tokens never reached auth.json is refused for good: the
// login is gone, later asks are answered at once without a call, and an operator's new login
// in auth.json brings it back without a restart.
func TestRefusedRefreshMeansGoneUntilNewLogin(t *testing.T) {
	e := newEnv(t)
	m := e.open(nil)
	stale := m.Login().AccessToken
	e.is.RotateElsewhere() // spent; auth.json not updated
	_, err := m.Refresh(ctxT(t), stale)
	if !errors.Is(err, codexauth.ErrLoginGone) {
		t.Fatalf("refresh: %v, want ErrLoginGone", err)
	}
	if st := m.Status(); st.State != codexauth.StateGone || st.LastOutcome != codexauth.OutcomeRejected {
		t.Errorf("status %+v", st)
	}
	if _, err := m.Refresh(ctxT(t), stale); !errors.Is(err, codexauth.ErrLoginGone) {
		t.Errorf("second refresh: %v", err)
	}
	if err := m.Usable(); !errors.Is(err, codexauth.ErrLoginGone) {
		t.Errorf("Usable: %v", err)
	}
	if c := e.is.Calls(); c != 1 {
		t.Errorf("%d token calls, want 1 (a refused token is not sent again)", c)
	}

	// `codex login` again.
	if err := e.is.WriteAuthFile(e.home); err != nil {
		t.Fatal(err)
	}
	if err := m.Usable(); err != nil {
		t.Fatalf("after a new login: %v", err)
	}
	if l := m.Login(); !e.is.Accepts(l.AccessToken) {
		t.Error("the new login's token was not taken")
	}
}

// invalid_grant is a refusal for good too.
func TestInvalidGrantMeansGone(t *testing.T) {
	e := newEnv(t)
	m := e.open(nil)
	e.is.SetFault(codexauthtest.FaultInvalidGrant)
	if _, err := m.Refresh(ctxT(t), m.Login().AccessToken); !errors.Is(err, codexauth.ErrLoginGone) {
		t.Fatalf("refresh: %v, want ErrLoginGone", err)
	}
}

// An endpoint that is down, or slower than the request bound, is not a lost login: the state is
// failing, the error says what happened, and the next refresh works once it is back. A hung call
// is still awaited after the callers were answered (its token is not sent again meanwhile).
func TestEndpointDownOrSlowIsNotGone(t *testing.T) {
	for _, fault := range []codexauthtest.Fault{codexauthtest.FaultDown, codexauthtest.FaultHang} {
		e := newEnv(t)
		m := e.open(func(c *codexauth.Config) { c.RequestTimeout = 300 * time.Millisecond })
		stale := m.Login().AccessToken
		e.is.Revoke()
		e.is.SetFault(fault)
		_, err := m.Refresh(ctxT(t), stale)
		if err == nil || errors.Is(err, codexauth.ErrLoginGone) {
			t.Errorf("fault %d: refresh err = %v, want a failure that is not ErrLoginGone", fault, err)
		}
		if st := m.Status(); st.State != codexauth.StateFailing || st.LastOutcome != codexauth.OutcomeFailed {
			t.Errorf("fault %d: status %+v", fault, st)
		}
		if fault == codexauthtest.FaultHang {
			if _, err := m.Refresh(ctxT(t), stale); err == nil || e.is.Calls() != 1 {
				t.Errorf("fault %d: a second ask while the call is awaited: %v, %d calls (want the same 1)", fault, err, e.is.Calls())
			}
			e.is.Release() // the late answer: 503, nothing spent
		}
		if err := m.WaitIdle(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		e.is.SetFault(codexauthtest.FaultNone)
		l, err := m.Refresh(ctxT(t), stale)
		if err != nil || !e.is.Accepts(l.AccessToken) {
			t.Errorf("fault %d: after recovery: %v", fault, err)
		}
		if st := m.Status(); st.State != codexauth.StateValid {
			t.Errorf("fault %d: status after recovery %+v", fault, st)
		}
	}
}

// The endpoint spent the refresh token but its answer was lost. The token is in doubt: never
// sent again (no reuse), the state says refresh_uncertain, and a newer login written to auth.json
// by another process ends the doubt at once.
func TestLostAnswerIsNeverRetried(t *testing.T) {
	e := newEnv(t)
	m := e.open(nil)
	stale := m.Login().AccessToken
	e.is.SetFault(codexauthtest.FaultLoseAnswer)
	if _, err := m.Refresh(ctxT(t), stale); !errors.Is(err, codexauth.ErrLoginGone) {
		t.Fatalf("lost answer: %v, want the login unusable", err)
	}
	e.is.SetFault(codexauthtest.FaultNone)
	if st := m.Status(); st.State != codexauth.StateUncertain || st.LastOutcome != codexauth.OutcomeUncertain {
		t.Errorf("status %+v, want refresh_uncertain", st)
	}
	if _, err := m.Refresh(ctxT(t), stale); !errors.Is(err, codexauth.ErrLoginGone) || e.is.Calls() != 1 {
		t.Fatalf("ask again: %v, %d calls; want no second call", err, e.is.Calls())
	}

	// Another process got the tokens and wrote them.
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.home, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	l, err := m.Refresh(ctxT(t), stale)
	if err != nil || l.AccessToken != access || e.is.Calls() != 1 {
		t.Fatalf("after the file was rotated: %v, adopted %v, calls %d (want 1)", err, l.AccessToken == access, e.is.Calls())
	}
	if r := e.is.Reused(); r != 0 {
		t.Errorf("%d reused-token calls, want 0", r)
	}
}

// Run refreshes a token that is about to expire before any child asks, and tells subscribers.
func TestRunRefreshesAheadOfExpiry(t *testing.T) {
	e := newEnv(t)
	e.is.MintExpiring(time.Now().Add(2 * time.Minute))
	if err := e.is.WriteAuthFile(e.home); err != nil {
		t.Fatal(err)
	}
	m := e.open(func(c *codexauth.Config) { c.RefreshAhead = 5 * time.Minute })
	kicked := make(chan struct{}, 1)
	defer m.Subscribe(func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	})()
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-kicked:
	case <-ctx.Done():
		t.Fatal("no refresh ahead of expiry")
	}
	if l := m.Login(); !e.is.Accepts(l.AccessToken) || e.is.Calls() != 1 {
		t.Errorf("after the refresh ahead: accepted %v, calls %d", e.is.Accepts(l.AccessToken), e.is.Calls())
	}
	if st := m.Status(); time.Until(st.Expires) < 30*time.Minute {
		t.Errorf("new token expires %v, want the issuer's full TTL", st.Expires)
	}
}

// Logins the daemon does not manage are left to codex.
func TestOpenKinds(t *testing.T) {
	dir := t.TempDir()
	if m, kind, err := codexauth.Open(codexauth.Config{CodexHome: dir}); m != nil || kind != codexauth.KindNone || err != nil {
		t.Errorf("no auth.json: %v %v %v", m, kind, err)
	}
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, codexauth.AuthFile), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"OPENAI_API_KEY": "sk-test"}`)
	if m, kind, err := codexauth.Open(codexauth.Config{CodexHome: dir}); m != nil || kind != codexauth.KindAPIKey || err != nil {
		t.Errorf("api key: %v %v %v", m, kind, err)
	}
	write(`{"auth_mode": "agentIdentity", "agent_identity": "x"}`)
	if m, kind, err := codexauth.Open(codexauth.Config{CodexHome: dir}); m != nil || kind != codexauth.KindOther || err != nil {
		t.Errorf("other: %v %v %v", m, kind, err)
	}
	write(`{"tokens": {"access_token": "not-a-jwt", "refresh_token": "rt"}}`)
	if _, _, err := codexauth.Open(codexauth.Config{CodexHome: dir}); err == nil {
		t.Error("an access token that is not a JWT: no error")
	}
	write(`[`)
	if _, _, err := codexauth.Open(codexauth.Config{CodexHome: dir}); err == nil {
		t.Error("garbage auth.json: no error")
	}
}

// The refresh token never follows a redirect.
func TestRefreshNeverFollowsRedirect(t *testing.T) {
	var hits int
	var mu sync.Mutex
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	defer target.Close()
	redir := httptest.NewServer(http.RedirectHandler(target.URL+"/oauth/token", http.StatusTemporaryRedirect))
	defer redir.Close()
	e := newEnv(t)
	m := e.open(func(c *codexauth.Config) { c.TokenURL = redir.URL })
	_, err := m.Refresh(ctxT(t), m.Login().AccessToken)
	if err == nil || errors.Is(err, codexauth.ErrLoginGone) {
		t.Errorf("redirect: err %v, want a transient failure", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 0 {
		t.Errorf("the redirect target got %d requests", hits)
	}
}
