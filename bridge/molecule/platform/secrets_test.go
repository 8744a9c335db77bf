package platform

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// codexAuthSecret is the secret the daemon reads (molecule.CodexAuthSecret).
const codexAuthSecret = "CODEX_AUTH_JSON"

func secretsReader(t *testing.T, url, ws, token string) *SecretsReader {
	t.Helper()
	r, err := NewSecretsReader(Options{URL: url, WorkspaceID: ws, Token: token, OrgID: "org-1", RequestTimeout: time.Minute}, &http.Client{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The workspace's CODEX_AUTH_JSON is read as the codex template's sync reads it: a GET with the
// workspace token and the org header; the answer's other secrets are not kept.
func TestSecretsReader(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	r := secretsReader(t, p.URL(), p.WorkspaceID(), p.Token())
	if _, err := r.Secret(context.Background(), codexAuthSecret); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("no secret: %v, want ErrNoSecret", err)
	}
	p.SetSecret(codexAuthSecret, `{"auth_mode":"chatgpt"}`)
	p.SetSecret("OPENAI_API_KEY", "sk-other")
	v, err := r.Secret(context.Background(), codexAuthSecret)
	if err != nil || v != `{"auth_mode":"chatgpt"}` {
		t.Fatalf("Secret = %q, %v", v, err)
	}
	for _, c := range p.CallsTo(moleculetest.RouteSecrets) {
		if c.Method != http.MethodGet || c.Header.Get("Authorization") != "Bearer "+p.Token() || c.Header.Get("X-Molecule-Org-Id") != "org-1" {
			t.Errorf("secrets call %s %v", c.Method, c.Header)
		}
	}
	bad := secretsReader(t, p.URL(), p.WorkspaceID(), "wrong-token")
	var he *HTTPError
	if _, err := bad.Secret(context.Background(), codexAuthSecret); !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		t.Errorf("wrong token: %v, want HTTP 401", err)
	}
}

// Hostile answers get nothing: a redirect is not followed (the token stays home), a body over
// the cap is refused whole, and neither error quotes what the body held.
func TestSecretsReaderHostile(t *testing.T) {
	spy := newSpy(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer redirect") {
			http.Redirect(w, r, spy.srv.URL+"/steal", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"CODEX_AUTH_JSON":"` + strings.Repeat("x", maxSecretsBody) + `"}`))
	}))
	t.Cleanup(srv.Close)
	if _, err := secretsReader(t, srv.URL, "ws-1", "redirect-token").Secret(context.Background(), codexAuthSecret); err == nil || !strings.Contains(err.Error(), "not followed") {
		t.Errorf("redirect: %v, want refused", err)
	}
	if n, _ := spy.seen(); n != 0 {
		t.Errorf("the redirect was followed (%d requests)", n)
	}
	_, err := secretsReader(t, srv.URL, "ws-1", "token").Secret(context.Background(), codexAuthSecret)
	if err == nil || !strings.Contains(err.Error(), "over") || strings.Contains(err.Error(), "xxxx") {
		t.Errorf("huge body: %v, want refused without its content", err)
	}
}

// spy is a listener on another port, where the platform's redirects point. It answers 200 to
// everything and records what reached it.
type spy struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests int
	withAuth int
}

func newSpy(t *testing.T) *spy {
	s := &spy{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		if r.Header.Get("Authorization") != "" {
			s.withAuth++
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *spy) seen() (requests, withAuth int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.withAuth
}
