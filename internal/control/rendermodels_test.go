package control

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/chatsettings"
)

// The text status shows the default model and effort and each chat that chose its own.
func TestRenderModels(t *testing.T) {
	doc := StatusDoc{Models: &ChatModels{
		Default: chatsettings.Resolved{Model: "m-default", ModelFrom: chatsettings.FromOperator, Effort: "low", EffortFrom: chatsettings.FromOperator},
		Chats: map[string]chatsettings.Resolved{"canvas:w": {Model: "m-big", ModelFrom: chatsettings.FromChat,
			Effort: "high", EffortFrom: chatsettings.FromChat}},
	}}
	var b strings.Builder
	Render(&b, doc, time.Now())
	out := b.String()
	for _, want := range []string{"models: default m-default (from the operator), effort low (from the operator); 1 chats chose their own:",
		"  canvas:w: model m-big (from this chat), effort high (from this chat)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	Render(&b, StatusDoc{}, time.Now())
	if strings.Contains(b.String(), "models:") {
		t.Errorf("status without models shows them:\n%s", b.String())
	}
}
