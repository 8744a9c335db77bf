package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// End-to-end tests of the daemon against the platform's limits and tenancy as its sources
// have them (docs/molecule.md, "Polling, limits and tenancy"), with real codex.

// The org's rate bucket is spent (another workspace of the org used it up): the daemon's next
// poll is answered 429, and no call of the daemon reaches the platform before its Retry-After
// ends (the recorded call times are the proof: a lower bound, never a wait). The message sent
// meanwhile is answered once the window refills.
func TestE2EMoleculeRateLimitHonoured(t *testing.T) {
	t.Parallel()
	const org = "org-e2e-1"
	// The limiter's clock stands still from before the bucket is spent until the daemon met a
	// 429, so the window cannot refill before the daemon's next call however slow the machine
	// is; then it runs again. A Retry-After read on the still clock is never shorter than the
	// window's real remainder, so the check below holds the daemon to the real window.
	var clock sync.Mutex
	var stillAt time.Time
	now := func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		if !stillAt.IsZero() {
			return stillAt
		}
		return time.Now()
	}
	still := func(on bool) {
		clock.Lock()
		defer clock.Unlock()
		stillAt = time.Time{}
		if on {
			stillAt = time.Now()
		}
	}
	e := newE2E(t, e2eConfig{
		Platform: moleculetest.Config{RateLimit: 40, RateWindow: 4 * time.Second, Clock: now},
		Env:      []string{"MOLECULE_ORG_ID=" + org},
	})
	d := e.start()
	d.waitPolls(2)

	// Spend the org's bucket from outside the daemon, as its other workspaces would.
	still(true)
	for {
		req, err := http.NewRequest(http.MethodGet, e.plat.URL()+"/health", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Molecule-Org-Id", org)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			break
		}
	}
	e.plat.Enqueue(moleculetest.CanvasMessage("sent while the bucket is spent"))
	d.waitPlatform("a daemon call answered 429", func() bool {
		for _, c := range e.plat.Calls() {
			if c.Route != moleculetest.RouteUnknown && c.Status == http.StatusTooManyRequests {
				return true
			}
		}
		return false
	})
	still(false)
	d.waitPlatform("the reply", func() bool { return e.countReplies("reply #1: sent while the bucket is spent") == 1 })
	d.waitPolls(3)

	var limited []moleculetest.Call
	for _, c := range e.plat.Calls() {
		if c.Route == moleculetest.RouteUnknown {
			continue // the test's own calls
		}
		for _, l := range limited {
			ra, err := strconv.Atoi(l.Answer.Get("Retry-After"))
			if err != nil {
				t.Fatalf("429 without Retry-After: %v", l.Answer)
			}
			// The daemon waits at least a second: the platform truncates the seconds left.
			if until := l.At.Add(time.Duration(max(ra, 1)) * time.Second); c.At.Before(until) {
				t.Fatalf("%s %s at %s: before the Retry-After (%ds) of the 429 at %s ended\n%s",
					c.Method, c.Path, c.At.Format(time.StampMilli), ra, l.At.Format(time.StampMilli), e.callSummary())
			}
		}
		if c.Status == http.StatusTooManyRequests {
			limited = append(limited, c)
		}
	}
	t.Logf("%d of the daemon's calls were answered 429", len(limited))
	if len(d.logsWith("platform rate limit reached (HTTP 429)")) == 0 {
		t.Error("the 429 was not logged")
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// On a SaaS tenant without MOLECULE_ORG_ID the daemon says so at its first poll, naming the
// variable. A reply the tenant guard refuses (400 TENANT_ORG_HEADER_REQUIRED) is never given
// up: it stays pending, and the daemon restarted with MOLECULE_ORG_ID delivers it once, without
// running codex again.
func TestE2EMoleculeTenantGuard(t *testing.T) {
	t.Parallel()
	const org = "0f1e2d3c-org-uuid"
	hold := make(chan struct{})
	e := newE2E(t, e2eConfig{
		Platform: moleculetest.Config{OrgID: org},
		Script: func(req mockmodel.Request) mockmodel.Reply {
			r := mockmodel.DefaultScript(req)
			if req.LastUserText == "held" {
				r.Hold = hold
			}
			return r
		},
	})
	d := e.start()
	d.waitUntil("the first poll's refusal logged naming MOLECULE_ORG_ID", func() bool {
		for _, l := range d.logsWith("MOLECULE_ORG_ID is not set") {
			if l.str("level") == "error" {
				return true
			}
		}
		return false
	})
	if n := e.plat.CountCalls(moleculetest.RouteActivity, http.StatusBadRequest); n == 0 {
		t.Fatal("no poll was refused by the guard")
	}

	// The guard lets the poll through, and is back before the reply.
	e.plat.SetOrgID("")
	ids := e.plat.Enqueue(moleculetest.CanvasMessage("held"))
	d.waitRequests(1)
	e.plat.SetOrgID(org)
	close(hold)
	d.waitPlatform("the reply refused by the guard twice", func() bool {
		return e.plat.CountCalls(moleculetest.RouteNotify, http.StatusBadRequest) >= 2
	})
	d.stop(stopTimeout)
	if !e.bridgeState().pending(ids[0]) {
		t.Fatalf("the refused reply is not pending in the state file: %+v", e.bridgeState())
	}
	if len(e.plat.Notifies()) != 0 {
		t.Fatalf("notifies %v", e.notifyTexts())
	}

	// The operator's fix: MOLECULE_ORG_ID set, the daemon restarted.
	e.extraEnv = append(e.extraEnv, "MOLECULE_ORG_ID="+org)
	d3 := e.start()
	d3.waitPlatform("the pending reply delivered", func() bool { return e.countReplies("reply #1: held") == 1 })
	d3.waitPolls(3)
	if n := e.countReplies("reply #1: held"); n != 1 {
		t.Fatalf("reply delivered %d times", n)
	}
	if n := len(e.requestsFor("held")); n != 1 {
		t.Fatalf("codex ran %d turns for the message, want 1", n)
	}
	d3.stop(stopTimeout)
	d.checkLog()
	d3.checkLog()
}

// With only the Molecule runtime's canonical variables (MOLECULE_API_URL, MOLECULE_WORKSPACE_ID,
// MOLECULE_WORKSPACE_TOKEN) and no --inbox flag, the daemon starts its Molecule inbox and
// answers.
func TestE2EMoleculeCanonicalVariables(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{CanonicalEnv: true})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("canonical"))
	d.waitPlatform("the reply", func() bool { return e.countReplies("reply #1: canonical") == 1 })
	if n := len(e.plat.Registers()); n != 1 {
		t.Fatalf("%d registers", n)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// The platform rotates the workspace token and writes the new one to <configs>/.auth_token;
// the old token is answered 401 from then on. The daemon takes the file's token and answers
// the next message.
func TestE2EMoleculeTokenRotation(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("before"))
	d.waitPlatform("the first reply", func() bool { return e.countReplies("reply #1: before") == 1 })

	const rotated = "rotated-workspace-token-5f4e3d2c1b"
	rotateWorkspaceToken(t, e, d, rotated)
	e.plat.Enqueue(moleculetest.CanvasMessage("after"))
	d.waitPlatform("the reply after the rotation", func() bool { return e.countReplies("reply #2: after") == 1 })
	if got := e.plat.Notifies()[1].Header.Get("Authorization"); got != "Bearer "+rotated {
		t.Fatalf("reply sent with %q", got)
	}
	if strings.Contains(d.log(), rotated) {
		t.Fatal("the rotated token reached the log")
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// 150 rows wait in the cold-start window (more than the platform's default page of 100): all
// 150 are answered exactly once, with real codex, over six chats (the canvas and five peers).
func TestE2EMoleculeColdStart150Rows(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	const n = 150
	rows := make([]moleculetest.Row, n)
	for i := range rows {
		text := fmt.Sprintf("row %03d", i)
		if peer := i % 6; peer == 0 {
			rows[i] = moleculetest.CanvasMessage(text)
		} else {
			rows[i] = moleculetest.PeerMessage(fmt.Sprintf("peer-%d", peer), text)
		}
	}
	e.plat.Enqueue(rows...)
	start := time.Now()
	d := e.start()
	d.waitPlatform("150 replies", func() bool { return e.plat.Deliveries() >= n })
	t.Logf("150 rows answered in %s", time.Since(start).Round(time.Millisecond))
	d.waitPolls(3)
	replies := map[string]int{}
	for _, m := range e.plat.Notifies() {
		replies[m.Message[strings.Index(m.Message, ": ")+2:]]++
	}
	for _, s := range e.plat.A2ASends() {
		replies[s.Text[strings.Index(s.Text, ": ")+2:]]++
	}
	for i := range n {
		if k := fmt.Sprintf("row %03d", i); replies[k] != 1 {
			t.Fatalf("%s answered %d times, want once", k, replies[k])
		}
	}
	if e.plat.Deliveries() != n {
		t.Fatalf("%d deliveries, want %d", e.plat.Deliveries(), n)
	}
	d.stop(stopTimeout)
	d.checkLog()
}

// rotateWorkspaceToken rotates the workspace token on the platform, waits until the daemon's
// old token was refused, and writes the new one to the configs directory's .auth_token
// (atomically, as the runtime does), where the daemon takes it up.
func rotateWorkspaceToken(t *testing.T, e *e2e, d *daemonProc, rotated string) {
	t.Helper()
	e.plat.RotateToken(rotated)
	d.waitPlatform("a call answered 401 to the old token", func() bool {
		return e.plat.CountCalls(moleculetest.RouteActivity, http.StatusUnauthorized) > 0
	})
	configs := filepath.Join(e.root, "no-configs")
	if err := os.MkdirAll(configs, 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(configs, ".auth_token.tmp")
	if err := os.WriteFile(tmp, []byte(rotated+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(configs, ".auth_token")); err != nil {
		t.Fatal(err)
	}
}
