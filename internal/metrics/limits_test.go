package metrics

import (
	"slices"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/metrics/metricstest"
	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Tokens are counted per chat kind and type, never per chat; the usage windows are reported as
// codex last gave them, and a window not reported yet has no value rather than a false 0.
func TestTokensAndLimits(t *testing.T) {
	var src fakeSource
	limits := supervisor.LimitStatus{Limited: true, Parked: 2, Hits: 3,
		Primary: &supervisor.LimitWindow{UsedPercent: 100, WindowMinutes: 300, ResetsAt: time.Unix(1795621141, 0)}}
	m := New(Config{Status: src.status, Limits: func() supervisor.LimitStatus { return limits }, NoRuntime: true})
	u := projector.Usage{InputTokens: 10, CachedInputTokens: 4, OutputTokens: 3, ReasoningOutputTokens: 2, TotalTokens: 13}
	m.ObserveTurn(supervisor.TurnEvent{ChatKey: "canvas:ws", Reply: supervisor.Reply{TurnID: "t1", Status: "completed", Usage: u}})
	m.ObserveTurn(supervisor.TurnEvent{ChatKey: "peer:alpha", Reply: supervisor.Reply{TurnID: "t2", Status: "completed", Usage: u}})
	m.ObserveTurn(supervisor.TurnEvent{ChatKey: "canvas:ws", Reply: supervisor.Reply{TurnID: "t3", Status: "completed", Usage: u}})
	f := scrape(t, m)
	for _, tc := range []struct {
		kind, typ string
		want      float64
	}{{KindCanvas, TokensInput, 20}, {KindCanvas, TokensCachedInput, 8}, {KindCanvas, TokensOutput, 6}, {KindCanvas, TokensReasoning, 4}, {KindPeer, TokensInput, 10}} {
		if v := f.MustValue(t, "codex_warm_tokens_total", metricstest.Labels{"kind": tc.kind, "type": tc.typ}); v != tc.want {
			t.Errorf("tokens{%s,%s} = %v, want %v", tc.kind, tc.typ, v, tc.want)
		}
	}
	kinds := f.LabelValues("codex_warm_tokens_total", "kind")
	slices.Sort(kinds)
	if kinds = slices.Compact(kinds); !slices.Equal(kinds, []string{KindCanvas, KindPeer}) {
		t.Errorf("kind labels %v: a chat key leaked into a label?", kinds)
	}
	for name, want := range map[string]float64{"codex_warm_usage_limited": 1, "codex_warm_usage_limit_parked": 2, "codex_warm_usage_limit_hits_total": 3} {
		if v := f.MustValue(t, name, nil); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := f.MustValue(t, "codex_warm_usage_limit_resets_at_seconds", metricstest.Labels{"window": "primary"}); v != 1795621141 {
		t.Errorf("primary reset %v", v)
	}
	if got := f.LabelValues("codex_warm_usage_limit_used_percent", "window"); len(got) != 1 || got[0] != "primary" {
		t.Errorf("used-percent windows %v, want only the reported one", got)
	}
}
