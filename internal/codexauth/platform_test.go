package codexauth_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

// blobSource is a platform source a test sets.
type blobSource struct {
	mu    sync.Mutex
	doc   []byte
	err   error
	reads int
}

func (b *blobSource) set(doc []byte, err error) {
	b.mu.Lock()
	b.doc, b.err = doc, err
	b.mu.Unlock()
}

func (b *blobSource) source(name string) codexauth.Source {
	return codexauth.Source{Name: name, Read: func(context.Context) ([]byte, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.reads++
		return b.doc, b.err
	}}
}

func loginExpiring(t *testing.T, exp time.Time, rt string) []byte {
	t.Helper()
	access := codexauthtest.JWT(map[string]any{"exp": exp.Unix(), "jti": rt,
		"https://api.openai.com/auth": map[string]any{"chatgpt_account_id": "acct-org", "chatgpt_plan_type": "pro"}})
	return codexauthtest.AuthDoc("", access, rt, "acct-org")
}

// A login the platform owns: the newest source wins, a child's refresh gets the platform's
// renewed token, a still-refused token is ErrNotRenewed, and the token endpoint is never called.
func TestPlatformLoginNeverRefreshed(t *testing.T) {
	is, err := codexauthtest.New(codexauthtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close()
	now := time.Now()
	secrets, env, file := &blobSource{}, &blobSource{}, &blobSource{}
	env.set(loginExpiring(t, now.Add(10*time.Minute), "rt-seed"), nil)
	secrets.set(loginExpiring(t, now.Add(50*time.Minute), "rt-2"), nil)
	file.set(nil, codexauth.ErrNoLogin)
	var outcomes []string
	var mu sync.Mutex
	m, kind, err := codexauth.Open(codexauth.Config{CodexHome: t.TempDir(), TokenURL: is.URL(),
		Platform:  []codexauth.Source{env.source("environment"), secrets.source("platform secrets"), file.source("auth.json")},
		OnRefresh: func(o string) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }})
	if err != nil || m == nil || kind != codexauth.KindChatGPT {
		t.Fatalf("Open: %v %v %v", m, kind, err)
	}
	defer m.Close()
	st := m.Status()
	if st.Owner != codexauth.OwnerPlatform || st.Source != "platform secrets" || st.PlanType != "pro" {
		t.Fatalf("status %+v, want the platform's newest login from its secrets", st)
	}
	kicked := make(chan struct{}, 4)
	defer m.Subscribe(func() { kicked <- struct{}{} })()
	held := m.Login().AccessToken

	// The platform renewed it; the child's refresh request reads it again.
	secrets.set(loginExpiring(t, now.Add(60*time.Minute), "rt-3"), nil)
	l, err := m.Refresh(context.Background(), held)
	if err != nil || l.AccessToken == held {
		t.Fatalf("Refresh after the platform renewed: %v, same token %v", err, l.AccessToken == held)
	}
	<-kicked
	// Nothing newer: the child is told the platform has not renewed it.
	if _, err := m.Refresh(context.Background(), l.AccessToken); !errors.Is(err, codexauth.ErrNotRenewed) {
		t.Fatalf("Refresh with nothing newer: %v, want ErrNotRenewed", err)
	}
	// An older login appearing in a source is never adopted over the newer one held.
	file.set(loginExpiring(t, now.Add(30*time.Minute), "rt-old"), nil)
	if _, err := m.Refresh(context.Background(), "another-stale-token"); err != nil {
		t.Fatal(err)
	}
	if m.Login().AccessToken != l.AccessToken {
		t.Error("an older login replaced the newer one held")
	}
	if err := m.Usable(); err != nil {
		t.Errorf("Usable: %v", err)
	}
	if calls := is.Calls(); calls != 0 {
		t.Errorf("%d token endpoint calls, want 0", calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 2 || outcomes[0] != codexauth.OutcomeAdopted || outcomes[1] != codexauth.OutcomeNotRenewed {
		t.Errorf("outcomes %v, want adopted then not_renewed", outcomes)
	}
}

// No source holds a login: Open says so.
func TestPlatformLoginNone(t *testing.T) {
	none := &blobSource{}
	none.set(nil, codexauth.ErrNoLogin)
	if _, _, err := codexauth.Open(codexauth.Config{CodexHome: t.TempDir(), Platform: []codexauth.Source{none.source("x")}}); !errors.Is(err, codexauth.ErrNoLogin) {
		t.Fatalf("Open: %v, want ErrNoLogin", err)
	}
}
