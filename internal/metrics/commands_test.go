package metrics

import (
	"slices"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/metrics/metricstest"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Chat commands count by command, never by chat.
func TestObserveCommand(t *testing.T) {
	m := New(Config{Status: func() supervisor.Snapshot { return supervisor.Snapshot{} }})
	for _, name := range []string{"model", "model", "undo"} {
		m.ObserveCommand(name)
	}
	f := scrape(t, m)
	if got := f.MustValue(t, "codex_warm_chat_commands_total", metricstest.Labels{"command": "model"}); got != 2 {
		t.Errorf("model commands %v, want 2", got)
	}
	if got := f.LabelValues("codex_warm_chat_commands_total", "command"); !slices.Equal(got, []string{"model", "undo"}) {
		t.Errorf("command labels %v", got)
	}
}
