package supervisor

import (
	"errors"
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/supervisor/turnwatch"
)

// DefaultModelSilent bounds the wait for a model's first answer to a turn. Measured on codex
// 0.169 (docs/PROTOCOL.md "A model that accepts and never answers"): a model endpoint that
// accepts the request and sends nothing leaves codex silent for good over HTTP (its
// stream_idle_timeout only runs once an answer has started; over the websocket it falls back to
// HTTP after that timeout, 5 minutes by default, and waits there again). A working model starts
// its first output item within seconds, however long it then takes.
const DefaultModelSilent = 2 * time.Minute

// handshakeCause is the cancel cause of a spawn or thread setup that took too long. It wraps
// appserver.ErrHandshakeTimeout so callers match one sentinel whichever side timed out first.
func handshakeCause(d time.Duration) error {
	return fmt.Errorf("%w: no answer within %s", appserver.ErrHandshakeTimeout, d)
}

func isDone(c Child) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// classifyTurn maps the error a turn ended with (and its context's cancel cause) to the watchdog
// that ended it, reported to the caller, and to the reason its child must retire; "" means none.
func classifyTurn(err, cause error, child Child) (watchdog, retire string) {
	if err == nil {
		return "", ""
	}
	var trip *turnwatch.TripError
	switch {
	case errors.Is(err, appserver.ErrWedged):
		return WatchdogWedged, WatchdogWedged
	case errors.Is(err, appserver.ErrChildExited) || isDone(child):
		return WatchdogDead, WatchdogDead
	case errors.Is(err, appserver.ErrProtocol):
		return "", ReasonProtocol
	case errors.As(cause, &trip):
		if trip.Watchdog == WatchdogPostTool {
			// A child that went silent after a tool is not trusted with the next turn even if it
			// honoured the interrupt.
			return trip.Watchdog, WatchdogPostTool
		}
		return trip.Watchdog, ""
	}
	return "", ""
}
