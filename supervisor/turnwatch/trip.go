package turnwatch

import (
	"fmt"
	"time"
)

// The watchdogs' names, in a TripError (and the supervisor's Watchdog names).
const (
	Deadline         = "turn_deadline"
	PostTool         = "post_tool_quiet"
	ModelUnreachable = "model_unreachable"
)

// TripError is the cancel cause of a turn ended by a watchdog.
type TripError struct {
	Watchdog string
	After    time.Duration
	Cause    string // codex's account, for ModelUnreachable
}

func (e *TripError) Error() string {
	if e.Cause != "" {
		return fmt.Sprintf("watchdog %s tripped after %s: %s", e.Watchdog, e.After, e.Cause)
	}
	return fmt.Sprintf("watchdog %s tripped after %s", e.Watchdog, e.After)
}
