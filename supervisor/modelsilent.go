package supervisor

import (
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// DefaultModelSilent bounds the wait for a model's first answer to a turn. Measured on codex
// 0.169 (docs/PROTOCOL.md "A model that accepts and never answers"): a model endpoint that
// accepts the request and sends nothing leaves codex silent for good over HTTP (its
// stream_idle_timeout only runs once an answer has started; over the websocket it falls back to
// HTTP after that timeout, 5 minutes by default, and waits there again). A working model starts
// its first output item within seconds, however long it then takes.
const DefaultModelSilent = 2 * time.Minute

// expectModel arms the first-answer watch: unless something comes from the model (an item other
// than the user's message, a delta, token usage, rate limits) within d, the turn ends as
// WatchdogModelUnreachable. Zero or negative: off.
func (w *turnWatch) expectModel(d time.Duration) {
	if d <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.silentTimer != nil {
		return
	}
	w.silentTimer = time.AfterFunc(d, func() {
		w.cancel(&tripError{watchdog: WatchdogModelUnreachable, after: d,
			cause: fmt.Sprintf("the model service accepted the request and sent nothing for %s", d)})
	})
}

// heardModelLocked disarms the first-answer watch once the model answered.
func (w *turnWatch) heardModelLocked(n protocol.Notification) {
	if w.silentTimer == nil || !fromModel(n) {
		return
	}
	w.silentTimer.Stop()
	w.silentTimer = nil
}

// fromModel reports whether a notification shows the model answering: an item of the turn other
// than the user's own message, any item delta, token usage or rate limits. codex's own
// notifications (turn/started, status changes, warnings, errors) do not count.
func fromModel(n protocol.Notification) bool {
	switch n.Method {
	case protocol.NotifyTokenUsageUpdated, protocol.NotifyRateLimitsUpdated:
		return true
	case protocol.NotifyItemStarted, protocol.NotifyItemCompleted:
		typ, ok := appserver.ItemType(n.Params)
		return ok && typ != "" && typ != protocol.ItemUserMessage
	}
	return strings.HasPrefix(n.Method, "item/")
}
