package turnwatch

import (
	"fmt"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// ExpectModel arms the first-answer watch: unless something comes from the model (an item other
// than the user's message, a delta, token usage, rate limits) within d, the turn ends as
// ModelUnreachable. Zero or negative: off.
func (w *Watch) ExpectModel(d time.Duration) {
	if d <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.silentTimer != nil {
		return
	}
	w.silentTimer = time.AfterFunc(d, func() {
		w.cancel(&TripError{Watchdog: ModelUnreachable, After: d,
			Cause: fmt.Sprintf("the model service accepted the request and sent nothing for %s", d)})
	})
}

// heardModelLocked disarms the first-answer watch once the model answered.
func (w *Watch) heardModelLocked(n protocol.Notification) {
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
