package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// Token types, the "type" label of codex_warm_tokens_total.
const (
	TokensInput       = "input"
	TokensCachedInput = "cached_input"
	TokensOutput      = "output"
	TokensReasoning   = "reasoning"
)

var (
	descLimitUsed    = desc("usage_limit_used_percent", "Used share of the account's usage window (primary: the 5-hour one, secondary: the weekly one), as codex last reported it.", "window")
	descLimitResets  = desc("usage_limit_resets_at_seconds", "When the account's usage window resets, Unix time.", "window")
	descLimited      = desc("usage_limited", "1 while the account's usage limit is reached and new turns wait for the reset.")
	descLimitParked  = desc("usage_limit_parked", "Messages parked until the account's usage limit resets.")
	descLimitHits    = desc("usage_limit_hits_total", "Times the account ran into its usage limit.")
	tokenTypesInHelp = "Tokens codex reported for its turns, by chat kind and type (input, cached_input, output, reasoning); cached input is part of input, reasoning part of output."
)

// newTokens is the codex_warm_tokens_total counter.
func newTokens() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "tokens_total", Help: tokenTypesInHelp},
		[]string{"kind", "type"})
}

// observeTokens adds a turn's token usage to the counter.
func (m *Metrics) observeTokens(kind string, r supervisor.Reply) {
	u := r.Usage
	for _, c := range []struct {
		typ string
		n   int64
	}{{TokensInput, u.InputTokens}, {TokensCachedInput, u.CachedInputTokens}, {TokensOutput, u.OutputTokens}, {TokensReasoning, u.ReasoningOutputTokens}} {
		if c.n > 0 {
			m.tokens.WithLabelValues(kind, c.typ).Add(float64(c.n))
		}
	}
}

// limitsCollector reads the account's usage limits at scrape time.
type limitsCollector struct {
	limits func() supervisor.LimitStatus
}

func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLimitUsed, descLimitResets, descLimited, descLimitParked, descLimitHits} {
		ch <- d
	}
}

func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.limits()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, w := range []struct {
		name string
		w    *supervisor.LimitWindow
	}{{"primary", l.Primary}, {"secondary", l.Secondary}} {
		if w.w == nil {
			continue // not reported yet: no value rather than a false 0
		}
		gauge(descLimitUsed, w.w.UsedPercent, w.name)
		if !w.w.ResetsAt.IsZero() {
			gauge(descLimitResets, float64(w.w.ResetsAt.Unix()), w.name)
		}
	}
	limited := 0.0
	if l.Limited {
		limited = 1
	}
	gauge(descLimited, limited)
	gauge(descLimitParked, float64(l.Parked))
	ch <- prometheus.MustNewConstMetric(descLimitHits, prometheus.CounterValue, float64(l.Hits))
}
