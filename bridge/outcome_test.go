package bridge

import (
	"errors"
	"fmt"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// OutcomeName maps every kind of Submit result to a name from its fixed set, by type, whatever
// the error text says.
func TestOutcomeName(t *testing.T) {
	for _, tc := range []struct {
		r    supervisor.Reply
		err  error
		want string
	}{
		{supervisor.Reply{Status: "completed"}, nil, OutcomeCompleted},
		{supervisor.Reply{Status: "failed"}, nil, OutcomeFailed},
		{supervisor.Reply{Status: "interrupted"}, nil, OutcomeInterrupted},
		{supervisor.Reply{}, fmt.Errorf("chat a: %w", supervisor.ErrQueueFull), OutcomeBusy},
		{supervisor.Reply{}, fmt.Errorf("chat a: %w", supervisor.ErrNoSlot), OutcomeBusy},
		{supervisor.Reply{}, fmt.Errorf("x: %w", appserver.ErrOverloaded), OutcomeBusy},
		{supervisor.Reply{}, fmt.Errorf("chat a: dropped: %w", supervisor.ErrStopped), OutcomeStopped},
		{supervisor.Reply{}, supervisor.ErrClosed, OutcomeClosed},
		{supervisor.Reply{}, &supervisor.CrashLoopError{ChatKey: "a", Err: errors.New("boom")}, OutcomeCrashLoop},
		{supervisor.Reply{}, &supervisor.WatchdogError{ChatKey: "a", Watchdog: supervisor.WatchdogTurn, Err: errors.New("late")}, "watchdog_turn_deadline"},
		{supervisor.Reply{}, &supervisor.WatchdogError{ChatKey: "a", Watchdog: "memory", Err: errors.New("x")}, "watchdog_other"},
		{supervisor.Reply{}, errors.New("chat canvas:secret-text: something odd"), OutcomeError},
	} {
		if got := OutcomeName(tc.r, tc.err); got != tc.want {
			t.Errorf("OutcomeName(%+v, %v) = %q, want %q", tc.r, tc.err, got, tc.want)
		}
	}
}
