package appserver_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/projector"
)

// A usage limit makes real codex fail the turn with usageLimitExceeded after an
// account/rateLimits/updated that carries the reset (routed to the turn although it names no
// thread); rate limits on a normal answer and the token details reach the turn too. Over HTTP
// the limit is a 429 with x-codex-* headers and rate limits are headers; over the Responses
// websocket it is an error event with status 429 and the same headers, and rate limits come as
// a codex.rate_limits event.
func TestRealUsageLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		httpOnly bool
	}{{"websocket", false}, {"http", true}} {
		t.Run(tc.name, func(t *testing.T) { realUsageLimit(t, tc.httpOnly) })
	}
}

func realUsageLimit(t *testing.T, httpOnly bool) {
	reset := time.Now().Add(2*time.Hour + 13*time.Minute).Truncate(time.Second)
	e := newRealEnv(t, mockmodel.Config{HTTPOnly: httpOnly, Script: func(req mockmodel.Request) mockmodel.Reply {
		if req.LastUserText == "limit" {
			return mockmodel.Reply{UsageLimit: &mockmodel.UsageLimit{ResetsAt: reset}}
		}
		return mockmodel.Reply{Text: "ok", Usage: &mockmodel.Usage{Input: 10, CachedInput: 4, Output: 3, Reasoning: 2},
			RateLimits: &mockmodel.RateLimits{Primary: &mockmodel.RateWindow{UsedPercent: 42, WindowMinutes: 300, ResetsAt: reset},
				Secondary: &mockmodel.RateWindow{UsedPercent: 7, WindowMinutes: 10080, ResetsAt: reset.Add(96 * time.Hour)}}}
	}})
	c := e.start(t, nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts(""))
	if err != nil {
		t.Fatal(err)
	}

	res := mustTurn(t, c, ctx, thread, "limit")
	if res.Status != protocol.TurnFailed {
		t.Fatalf("status %q, want failed", res.Status)
	}
	if kind, _ := res.Error.Kind(); kind != protocol.CodexErrorUsageLimitExceeded {
		t.Errorf("turn error kind %q, want %s (error %+v)", kind, protocol.CodexErrorUsageLimitExceeded, res.Error)
	}
	at, ok := appserver.UsageLimit(res.Notifications)
	if !ok || !at.Equal(reset) {
		t.Errorf("UsageLimit = %v, %v; want %v, true", at, ok, reset)
	}
	if reqs := e.mock.Requests(); len(reqs) != 1 || reqs[0].Websocket == httpOnly {
		t.Errorf("codex sent %d requests (websocket %v), want 1 on the transport under test: a usage limit is not retried", len(reqs), len(reqs) > 0 && reqs[0].Websocket)
	}

	res = mustTurn(t, c, ctx, thread, "hello")
	if _, ok := appserver.UsageLimit(res.Notifications); ok || res.Status != protocol.TurnCompleted {
		t.Fatalf("second turn: status %q, limit %v", res.Status, ok)
	}
	var rl *protocol.RateLimitSnapshot
	for _, n := range res.Notifications {
		if got, ok := appserver.RateLimits(n); ok {
			rl = &got
		}
	}
	if rl == nil || rl.Primary == nil || rl.Primary.UsedPercent != 42 || *rl.Primary.ResetsAt != reset.Unix() ||
		rl.Secondary == nil || *rl.Secondary.WindowDurationMins != 10080 {
		t.Errorf("rate limits of the second turn: %+v", rl)
	}
	if u := projector.Project(res.Notifications).Usage; u.InputTokens != 10 || u.CachedInputTokens != 4 || u.OutputTokens != 3 || u.ReasoningOutputTokens != 2 {
		t.Errorf("usage %+v, want 10 in (4 cached), 3 out (2 reasoning)", u)
	}
}

// A 429 whose body has resets_at and no x-codex-* headers: codex reports no window, and puts
// the reset only in its message ("try again at 2:07 PM.", "… at Dec 2nd, 2026 2:06 PM."); the
// reset is read from there, rounded up to the minute (before: a 5-minute guess).
func TestRealUsageLimitWithoutHeaders(t *testing.T) {
	for _, d := range []time.Duration{3 * time.Minute, 6 * 24 * time.Hour} {
		reset := time.Now().Add(d).Truncate(time.Second)
		e := newRealEnv(t, mockmodel.Config{HTTPOnly: true, Script: func(mockmodel.Request) mockmodel.Reply {
			return mockmodel.Reply{UsageLimit: &mockmodel.UsageLimit{ResetsAt: reset}, RateLimits: &mockmodel.RateLimits{}}
		}})
		c := e.start(t, nil)
		ctx := ctxTimeout(t, 2*time.Minute)
		thread, err := c.StartThread(ctx, e.threadOpts(""))
		if err != nil {
			t.Fatal(err)
		}
		res := mustTurn(t, c, ctx, thread, "limit")
		want := reset.Truncate(time.Minute).Add(time.Minute)
		if at, ok := appserver.UsageLimit(res.Notifications); !ok || !at.Equal(want) {
			t.Errorf("reset in %s: UsageLimit = %v, %v; want %v (message %q)", d, at, ok, want, res.Error.Message)
		}
	}
}
