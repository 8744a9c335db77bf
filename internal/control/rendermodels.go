package control

import (
	"fmt"
	"io"
	"slices"

	"github.com/molecule-ai/codex-warm/internal/chatsettings"
)

// ChatModels is the status document's part on models: what a chat without a choice runs with,
// and each chat that chose its own model or effort (/model, /effort).
type ChatModels struct {
	Default chatsettings.Resolved            `json:"default"`
	Chats   map[string]chatsettings.Resolved `json:"chats,omitempty"`
}

// renderModels writes the models' lines of the status table.
func renderModels(w io.Writer, m *ChatModels) {
	if m == nil {
		return
	}
	fmt.Fprintf(w, "models: default %s (from %s), effort %s (from %s)", orDash(m.Default.Model), m.Default.ModelFrom,
		orDash(m.Default.Effort), m.Default.EffortFrom)
	if len(m.Chats) == 0 {
		fmt.Fprintln(w, "; no chat chose its own")
		return
	}
	fmt.Fprintf(w, "; %d chats chose their own:\n", len(m.Chats))
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m.Chats {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		r := m.Chats[k]
		fmt.Fprintf(w, "  %s: model %s (from %s), effort %s (from %s)\n", k, orDash(r.Model), r.ModelFrom, orDash(r.Effort), r.EffortFrom)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
