package molecule

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

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

// A redirect on a platform call is never followed, so the token never reaches the target; the
// failure names the target, and the inbox goes on once the platform stops redirecting. Also when
// the caller brings its own http.Client, which follows redirects by default: the inbox uses a
// copy with its own policy and leaves the caller's client alone.
func TestRedirectNeverFollowed(t *testing.T) {
	t.Parallel()
	for _, injected := range []bool{false, true} {
		name := "own client"
		if injected {
			name = "injected client"
		}
		t.Run(name, func(t *testing.T) {
			p := moleculetest.NewPlatform(t, moleculetest.Config{})
			s := newSpy(t)
			a := chattest.NewAnswerer(nil)
			log, logs := newTestLogger(t)
			cfg := testConfig(p, t.TempDir(), a, log)
			var hc *http.Client
			if injected {
				hc = &http.Client{}
				cfg.HTTPClient = hc
			}
			target := s.srv.URL + "/workspaces/" + p.WorkspaceID() + "/activity"
			p.RedirectNext(moleculetest.RouteActivity, 2, http.StatusFound, target)
			p.RedirectNext(moleculetest.RouteActivity, 1, http.StatusTemporaryRedirect, target)
			r := start(t, cfg)
			if hc != nil && hc.CheckRedirect != nil {
				t.Error("the caller's http.Client was changed")
			}
			p.Enqueue(moleculetest.CanvasMessage("after the redirects"))
			ctx := waitCtx(t)
			must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))

			if req, auth := s.seen(); req != 0 || auth != 0 {
				t.Fatalf("the redirect target got %d requests, %d with the token", req, auth)
			}
			if n := p.CountCalls(moleculetest.RouteActivity, http.StatusFound) + p.CountCalls(moleculetest.RouteActivity, http.StatusTemporaryRedirect); n != 3 {
				t.Fatalf("%d redirected polls, want 3", n)
			}
			if st := r.m.Stats(); st.PollErrors < 3 {
				t.Errorf("poll errors = %d, want the 3 redirects counted", st.PollErrors)
			}
			named := false
			for _, e := range logs.FilterMessageSnippet("poll failed").All() {
				named = named || strings.Contains(entryText(e), target)
			}
			if !named {
				t.Error("no poll failure names the redirect target")
			}
		})
	}
}

// https to http: a platform behind TLS that redirects to a plain-http address must not make the
// token travel in clear text. A redirect at register is a configuration error: Run fails and
// names the target.
func TestRedirectToPlainHTTPNeverCarriesToken(t *testing.T) {
	t.Parallel()
	s := newSpy(t)
	front := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.srv.URL+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer front.Close()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
	cfg.PlatformURL = front.URL
	cfg.HTTPClient = front.Client()
	m, err := New(cfg)
	must(t, err)
	runErr := m.Run(waitCtx(t))
	if req, auth := s.seen(); auth != 0 || req != 0 {
		t.Fatalf("the plain-http target got %d requests, %d with the token", req, auth)
	}
	if runErr == nil || !strings.Contains(runErr.Error(), s.srv.URL) || strings.Contains(runErr.Error(), cfg.Token) {
		t.Fatalf("Run = %v, want an error naming the redirect target", runErr)
	}
}

// A redirect on a reply is a failed delivery: the POST is not turned into a body-less GET
// somewhere else that counts as delivered. The reply stays pending, is retried without running
// codex again, and is delivered once the platform stops redirecting.
func TestReplyRedirectIsNotDelivery(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	s := newSpy(t)
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	r := start(t, testConfig(p, t.TempDir(), a, log))
	p.RedirectNext(moleculetest.RouteNotify, 2, http.StatusFound, s.srv.URL+"/notify-elsewhere")
	p.RedirectNext(moleculetest.RouteA2A, 2, http.StatusMovedPermanently, s.srv.URL+"/a2a-elsewhere")

	p.Enqueue(moleculetest.CanvasMessage("to canvas"), moleculetest.PeerMessage("peer-1", "to peer"))
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == 2 })))

	if n, sends := len(p.Notifies()), len(p.A2ASends()); n != 1 || sends != 1 {
		t.Fatalf("counted delivered, but the platform got %d notifies and %d A2A sends, want 1 and 1", n, sends)
	}
	if req, _ := s.seen(); req != 0 {
		t.Fatalf("the redirect target got %d requests", req)
	}
	if st := r.m.Stats(); st.DeliveryRetries < 4 || st.DeliveryFailed != 0 || len(a.Calls()) != 2 {
		t.Fatalf("stats = %+v, %d Submits: want 4 retries, nothing given up, codex run once per message", st, len(a.Calls()))
	}
	named := 0
	for _, e := range logs.FilterMessageSnippet("reply delivery failed").All() {
		if txt := entryText(e); strings.Contains(txt, s.srv.URL) && strings.Contains(txt, "redirect") {
			named++
		}
	}
	if named < 4 {
		t.Errorf("%d delivery failures name the redirect target, want 4", named)
	}
}
