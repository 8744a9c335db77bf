package molecule

import (
	"slices"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
)

// countingControls are Controls that count the commands answered.
type countingControls struct {
	*chattest.Controls
	names *[]string
}

func (c countingControls) ObserveCommand(name string) { *c.names = append(*c.names, name) }

// A /new queued behind the chat's messages is counted like any other command.
func TestQueuedResetIsCounted(t *testing.T) {
	var names []string
	ctl := queuedResetControls{countingControls{&chattest.Controls{}, &names}}
	cmd, _ := chat.ParseCommand("/new")
	chat.RunCommand(t.Context(), ctl, "k", cmd, 0)
	if !slices.Equal(names, []string{chat.CmdNew}) {
		t.Errorf("counted %v, want the /new", names)
	}
}
