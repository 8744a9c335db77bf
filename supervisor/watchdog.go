package supervisor

import (
	"errors"
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
)

// tripError is the cancel cause of a turn ended by a watchdog.
type tripError struct {
	watchdog string
	after    time.Duration
	cause    string // codex's account, for WatchdogModelUnreachable
}

func (e *tripError) Error() string {
	if e.cause != "" {
		return fmt.Sprintf("watchdog %s tripped after %s: %s", e.watchdog, e.after, e.cause)
	}
	return fmt.Sprintf("watchdog %s tripped after %s", e.watchdog, e.after)
}

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
	var trip *tripError
	switch {
	case errors.Is(err, appserver.ErrWedged):
		return WatchdogWedged, WatchdogWedged
	case errors.Is(err, appserver.ErrChildExited) || isDone(child):
		return WatchdogDead, WatchdogDead
	case errors.Is(err, appserver.ErrProtocol):
		return "", ReasonProtocol
	case errors.As(cause, &trip):
		if trip.watchdog == WatchdogPostTool {
			// A child that went silent after a tool is not trusted with the next turn even if it
			// honoured the interrupt.
			return trip.watchdog, WatchdogPostTool
		}
		return trip.watchdog, ""
	}
	return "", ""
}
