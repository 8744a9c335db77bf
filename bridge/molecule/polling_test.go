package molecule

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// runIn runs an inbox inside a synctest bubble until the returned stop is called.
func runIn(t *testing.T, cfg Config) (*Inbox, func()) {
	t.Helper()
	m, err := New(cfg)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	return m, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// After a 429 no call of the bucket reaches the platform before its Retry-After ends, whatever
// the call (poll, heartbeat, reply, ack): the whole org's bucket is spent by another workspace of
// the org, the inbox's next call is answered 429, and every call after it comes no earlier than
// the Retry-After. The message waiting meanwhile is answered once the window refills.
func TestRetryAfterHoldsEveryCall(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{AckEnabled: true})
	synctest.Test(t, func(t *testing.T) {
		log, logs := newTestLogger(t)
		cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
		p.SetRateLimit(40, time.Minute)
		cfg.HTTPClient = &http.Client{Transport: p.Transport()}
		cfg.PollInterval = time.Second
		cfg.HeartbeatInterval = 3 * time.Second
		cfg.RetryInitial = 100 * time.Millisecond
		m, stop := runIn(t, cfg)
		defer stop()
		time.Sleep(2 * time.Second)

		// Another workspace of the org spends the shared bucket (X-Molecule-Org-Id keys it).
		other := &http.Client{Transport: p.Transport()}
		for {
			req, _ := http.NewRequest(http.MethodGet, p.URL()+"/health", nil)
			req.Header.Set("X-Molecule-Org-Id", cfg.OrgID)
			resp, err := other.Do(req)
			must(t, err)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				break
			}
		}
		p.Enqueue(moleculetest.CanvasMessage("while limited"))
		time.Sleep(3 * time.Minute)
		if s := m.Stats(); s.Delivered != 1 || s.RateLimited == 0 {
			t.Fatalf("stats = %+v, want the message answered after a 429", s)
		}

		var limited []moleculetest.Call
		mine := 0
		for _, c := range p.Calls() {
			if c.Route == moleculetest.RouteUnknown {
				continue
			}
			mine++
			for _, l := range limited {
				ra, err := strconv.Atoi(l.Answer.Get("Retry-After"))
				if err != nil {
					t.Fatalf("429 without a Retry-After: %v", l.Answer)
				}
				// A call at the 429's own instant was in flight beside it (the bubble's clock
				// stands still while goroutines run): only calls after it must wait.
				if until := l.At.Add(time.Duration(max(ra, 1)) * time.Second); c.At.After(l.At) && c.At.Before(until) {
					t.Fatalf("%s at %s, before the Retry-After of the 429 at %s ended (%s)", c.Route, c.At, l.At, until)
				}
			}
			if c.Status == http.StatusTooManyRequests {
				limited = append(limited, c)
			}
		}
		if len(limited) == 0 || len(limited) > 4 {
			t.Fatalf("%d of the inbox's %d calls answered 429, want at least 1 and at most one per window", len(limited), mine)
		}
		if logs.FilterMessageSnippet("rate limit reached (HTTP 429)").Len() == 0 {
			t.Error("the 429 was not logged")
		}
	})
}

// On a SaaS tenant without MOLECULE_ORG_ID the first poll is refused 400
// TENANT_ORG_HEADER_REQUIRED and the log names MOLECULE_ORG_ID. A reply the guard refuses is
// kept and retried, never given up, and delivered once the guard lets it through.
func TestTenantGuardNamesOrgIDAndKeepsReplies(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{OrgID: "org-uuid-1"})
	g := chattest.NewGate()
	a := chattest.GatedAnswerer(g)
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.OrgID = ""
	r := start(t, cfg)
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteActivity, http.StatusBadRequest) >= 3 }))
	named := logs.FilterMessageSnippet("MOLECULE_ORG_ID").FilterLevelExact(zapcore.ErrorLevel).Len()
	if named != 1 {
		t.Fatalf("%d error lines name MOLECULE_ORG_ID after 3 refused polls, want one", named)
	}

	// The guard is lifted long enough for the message to be polled, and back before the reply.
	p.SetOrgID("")
	p.Enqueue(moleculetest.CanvasMessage("hello"))
	must(t, p.WaitFor(ctx, func() bool { return len(a.Calls()) == 1 }))
	p.SetOrgID("org-uuid-1")
	g.Open()
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteNotify, http.StatusBadRequest) >= 3 }))
	if s := r.m.Stats(); s.DeliveryFailed != 0 || s.PendingReplies != 1 {
		t.Fatalf("stats = %+v: a reply refused for the missing org header must stay pending", s)
	}
	p.SetOrgID("")
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 })))
	if s := r.m.Stats(); s.DeliveryFailed != 0 || len(p.Notifies()) != 1 {
		t.Fatalf("stats = %+v, %d notifies: want the reply delivered once", s, len(p.Notifies()))
	}
}

// The token rotates in its file: once the file holds a new token (the platform rotated it and
// the old one is answered 401), the next message is answered with the new one.
func TestTokenRotatesInFile(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.TokenFile = filepath.Join(t.TempDir(), TokenFileName)
	must(t, os.WriteFile(cfg.TokenFile, []byte(p.Token()+"\n"), 0o600))
	r := start(t, cfg)
	ctx := waitCtx(t)
	p.Enqueue(moleculetest.CanvasMessage("before"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))

	const rotated = "rotated-token-9876543210"
	p.RotateToken(rotated)
	must(t, p.WaitFor(ctx, func() bool { return countStatus(p, http.StatusUnauthorized) >= 2 }))
	tmp := cfg.TokenFile + ".new"
	must(t, os.WriteFile(tmp, []byte(rotated), 0o600))
	must(t, os.Rename(tmp, cfg.TokenFile))
	p.Enqueue(moleculetest.CanvasMessage("after"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 2 }))
	if got := p.Notifies()[1].Header.Get("Authorization"); got != "Bearer "+rotated {
		t.Fatalf("reply sent with %q, want the rotated token", got)
	}
	if logs.FilterMessageSnippet("workspace token rotated").Len() != 1 {
		t.Error("the rotation was not logged once")
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), rotated) {
			t.Fatalf("the rotated token reached the log: %s", e.Message)
		}
	}
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == 2 && s.PendingReplies == 0 })))
}

// MOLECULE_WORKSPACE_TOKEN_FILE (the runtime sets it) names where the token is and rotates: a
// token rotated in that file answers the next message, and the default file is not read.
func TestTokenRotatesInTokenFileVariable(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	named := filepath.Join(t.TempDir(), "workspace-token")
	must(t, os.WriteFile(named, []byte(p.Token()+"\n"), 0o600))
	configs := t.TempDir()
	must(t, os.WriteFile(filepath.Join(configs, TokenFileName), []byte("stale-default-file-token"), 0o600))
	env := map[string]string{"PLATFORM_URL": p.URL(), "WORKSPACE_ID": p.WorkspaceID(), "HOME": t.TempDir(),
		"CONFIGS_DIR": configs, "MOLECULE_WORKSPACE_TOKEN_FILE": named}
	fromEnv, err := ConfigFromEnv(func(k string) string { return env[k] })
	must(t, err)
	cfg := testConfig(p, t.TempDir(), a, log)
	cfg.Token, cfg.TokenFile = fromEnv.Token, fromEnv.TokenFile
	r := start(t, cfg)
	ctx := waitCtx(t)
	p.Enqueue(moleculetest.CanvasMessage("before"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))

	const rotated = "rotated-token-in-named-file"
	p.RotateToken(rotated)
	must(t, p.WaitFor(ctx, func() bool { return countStatus(p, http.StatusUnauthorized) >= 1 }))
	must(t, os.WriteFile(named+".new", []byte(rotated), 0o600))
	must(t, os.Rename(named+".new", named))
	p.Enqueue(moleculetest.CanvasMessage("after"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 2 }))
	if got := p.Notifies()[1].Header.Get("Authorization"); got != "Bearer "+rotated {
		t.Fatalf("reply sent with %q, want the token rotated in MOLECULE_WORKSPACE_TOKEN_FILE", got)
	}
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == 2 && s.PendingReplies == 0 })))
}

// A workspace without a live token gets one from register: it is saved in the token file
// (mode 0600) and used from then on. A register answer naming another delivery mode than poll
// is an error in the log.
func TestRegisterIssuedTokenSaved(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{NoLiveToken: true, Token: "issued-token-0123456789", DeliveryMode: "push"})
	log, logs := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), chattest.NewAnswerer(nil), log)
	cfg.Token = "stale-token-from-env"
	cfg.TokenFile = filepath.Join(t.TempDir(), "configs", TokenFileName)
	r := start(t, cfg)
	ctx := waitCtx(t)
	p.Enqueue(moleculetest.CanvasMessage("hi"))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 }))
	b, err := os.ReadFile(cfg.TokenFile)
	must(t, err)
	fi, err := os.Stat(cfg.TokenFile)
	must(t, err)
	if string(b) != "issued-token-0123456789" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file holds %q with mode %v, want the issued token, 0600", b, fi.Mode().Perm())
	}
	if n := countStatus(p, http.StatusUnauthorized); n != 0 {
		t.Errorf("%d calls answered 401", n)
	}
	if e := logs.FilterMessageSnippet(`delivery mode "push", not poll`).All(); len(e) != 1 || e[0].Level.String() != "error" {
		t.Errorf("a push-mode registration was not logged as one error")
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "issued-token-0123456789") {
			t.Fatalf("the issued token reached the log: %s", e.Message)
		}
	}
	_ = r
}

// A cold start whose window holds more rows than a page (the platform answers the newest
// `limit` rows, 500 at most) walks the window back with before_ts and answers every row exactly
// once, oldest first; rows stored in the same microsecond across a page's edge are not lost.
func TestColdStartPagesWholeWindow(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	const n = 1050
	rows := make([]moleculetest.Row, n)
	for i := range rows {
		rows[i] = moleculetest.CanvasMessage(fmt.Sprintf("m%04d", i))
	}
	p.Enqueue(rows...) // one call: many rows share a microsecond
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	r := start(t, cfg)
	ctx := waitCtx(t)
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == n })))
	seen := map[string]int{}
	for _, c := range a.Calls() {
		seen[c.Text]++
	}
	for i := range n {
		if k := fmt.Sprintf("m%04d", i); seen[k] != 1 {
			t.Fatalf("%s answered %d times, want once", k, seen[k])
		}
	}
	if calls := a.Calls(); calls[0].Text != "m0000" {
		t.Errorf("first answered %q, want the oldest row first", calls[0].Text)
	}
	walked := false
	for _, c := range p.CallsTo(moleculetest.RouteActivity) {
		if c.Query.Get("limit") != "500" {
			t.Fatalf("poll %v without limit=500", c.Query)
		}
		walked = walked || c.Query.Has("before_ts")
	}
	if !walked {
		t.Error("the window was not walked back with before_ts")
	}
}

// A backlog after the cursor larger than a page (since_id pages are capped at limit too) is
// read page after page, every row answered once.
func TestBacklogPagesAfterCursor(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	a := chattest.NewAnswerer(nil)
	log, _ := newTestLogger(t)
	cfg := testConfig(p, t.TempDir(), a, log)
	r := start(t, cfg)
	ctx := waitCtx(t)
	p.Enqueue(moleculetest.CanvasMessage("first"))
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == 1 })))
	const n = 600
	rows := make([]moleculetest.Row, n)
	for i := range rows {
		rows[i] = moleculetest.CanvasMessage(fmt.Sprintf("b%04d", i))
	}
	p.Enqueue(rows...)
	must(t, p.WaitFor(ctx, statsCond(r.m, func(s Stats) bool { return s.Delivered == n+1 })))
	seen := map[string]int{}
	for _, c := range a.Calls() {
		seen[c.Text]++
	}
	for i := range n {
		if k := fmt.Sprintf("b%04d", i); seen[k] != 1 {
			t.Fatalf("%s answered %d times, want once", k, seen[k])
		}
	}
}

// countStatus counts the recorded calls of any route answered with status.
func countStatus(p *moleculetest.Platform, status int) int {
	n := 0
	for _, c := range p.Calls() {
		if c.Status == status {
			n++
		}
	}
	return n
}
