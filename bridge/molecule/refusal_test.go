package molecule

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// A SaaS tenant whose org id is not the daemon's MOLECULE_ORG_ID (MOLECULE.md section 9):
// register and heartbeat pass, every other route answers a bare 404. The daemon says so once at
// error level (naming MOLECULE_ORG_ID, WORKSPACE_ID and the restart), is not ready with the
// cause, degrades its heartbeat, never calls the platform unreachable, and resumes answers (and
// acks) once the platform accepts the workspace again, without a restart.
func TestWrongOrgIsARefusalNotAnAbsence(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{OrgID: "org-7", AckEnabled: true})
	dir := t.TempDir()
	ctx := waitCtx(t)

	// A first run acks a message, so the second has an ack to send from its start.
	log1, _ := newTestLogger(t)
	r1 := start(t, testConfig(p, dir, chattest.NewAnswerer(nil), log1))
	p.Enqueue(moleculetest.CanvasMessage("first").WithSeq(1))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 1 && len(p.Acks()) > 0 }))
	must(t, r1.stop())

	p.SetOrgID("org-of-another-tenant")
	log, logs := newTestLogger(t)
	cfg := testConfig(p, dir, chattest.NewAnswerer(nil), log)
	cfg.HeartbeatInterval = 20 * time.Millisecond
	r := start(t, cfg)
	must(t, p.WaitFor(ctx, func() bool {
		return p.CountCalls(moleculetest.RouteActivity, http.StatusNotFound) >= 3 &&
			p.CountCalls(moleculetest.RouteAck, http.StatusNotFound) >= 1
	}))
	must(t, p.WaitFor(ctx, func() bool {
		hb := p.Heartbeats()
		if len(hb) == 0 {
			return false
		}
		last := hb[len(hb)-1]
		rate, _ := last["error_rate"].(float64)
		task, _ := last["current_task"].(string)
		sample, _ := last["sample_error"].(string)
		return rate >= 0.5 && strings.Contains(task, "refuses") && strings.Contains(sample, "MOLECULE_ORG_ID")
	}))
	err := r.m.Refused()
	if !errors.Is(err, ErrWorkspaceRefused) || !strings.Contains(err.Error(), "MOLECULE_ORG_ID") {
		t.Fatalf("Refused() = %v, want ErrWorkspaceRefused naming MOLECULE_ORG_ID", err)
	}
	if s := r.m.Stats(); !strings.Contains(s.Refused, "MOLECULE_ORG_ID") {
		t.Fatalf("Stats().Refused = %q, want the refusal named", s.Refused)
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("MOLECULE_ORG_ID").All()
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "WORKSPACE_ID") || !strings.Contains(errs[0].Message, "restart") {
		t.Fatalf("error lines naming MOLECULE_ORG_ID: %d (%v), want one naming WORKSPACE_ID and the restart", len(errs), errs)
	}
	for _, snippet := range []string{"unreachable", "no event stream", "no activity mailbox"} {
		if n := logs.FilterMessageSnippet(snippet).Len(); n != 0 {
			t.Errorf("%d log lines say %q of a platform that answered 404", n, snippet)
		}
	}

	// The platform's routing is repaired: answers and acks resume without a restart.
	p.SetOrgID("org-7")
	p.Enqueue(moleculetest.CanvasMessage("second").WithSeq(2))
	must(t, p.WaitFor(ctx, func() bool { return len(p.Notifies()) == 2 }))
	must(t, p.WaitFor(ctx, func() bool { return p.CountCalls(moleculetest.RouteAck, http.StatusOK) >= 2 }))
	must(t, p.WaitFor(ctx, func() bool { return r.m.Refused() == nil }))
	if n := logs.FilterMessageSnippet("accepts the workspace again").Len(); n != 1 {
		t.Errorf("%d lines say the platform accepts the workspace again, want one", n)
	}
}
