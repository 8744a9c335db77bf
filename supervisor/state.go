package supervisor

import "fmt"

// Reasons a child was retired besides the watchdog names; keys of Totals.Retired.
const (
	// ReasonIdle: the child was idle for Config.IdleTTL.
	ReasonIdle = "idle"
	// ReasonEvicted: the least recently used idle child made room for another chat key.
	ReasonEvicted = "evicted"
	// ReasonShutdown: the supervisor shut down.
	ReasonShutdown = "shutdown"
	// ReasonStartFailed: spawn or thread start/resume failed (other than a handshake timeout).
	ReasonStartFailed = "start_failed"
	// ReasonProtocol: a turn ended because the child's answer could not be read. Codex may still
	// be running that turn and would merge the next turn/start into it, so the child is not
	// trusted with another turn.
	ReasonProtocol = "protocol_error"
)

// transitions is the lifecycle table. starting → retiring exists besides the issue's
// starting → dead because a child can be up while its thread start/resume fails: it must be
// closed and reaped, which is what retiring means. starting → dead is the spawn that never
// produced a process.
var transitions = map[State][]State{
	StateStarting: {StateIdle, StateRetiring, StateDead},
	StateIdle:     {StateBusy, StateRetiring},
	StateBusy:     {StateIdle, StateRetiring},
	StateRetiring: {StateDead},
	StateDead:     nil,
}

// checkTransition reports whether from → to is a lifecycle transition. An invalid one is a
// programming error in the supervisor; callers log it and keep the current state.
func checkTransition(from, to State) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return fmt.Errorf("supervisor: invalid child state transition %s → %s", from, to)
}
