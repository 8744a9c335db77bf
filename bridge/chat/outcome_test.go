package chat

import (
	"errors"
	"fmt"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// OutcomeLabel maps every kind of Submit result to a name from its fixed set, by type, whatever
// the error text says.
func TestOutcomeName(t *testing.T) {
	for _, tc := range []struct {
		r    supervisor.Reply
		err  error
		want string
	}{
		{supervisor.Reply{Status: "completed"}, nil, LabelCompleted},
		{supervisor.Reply{Status: "failed"}, nil, LabelFailed},
		{supervisor.Reply{Status: "interrupted"}, nil, LabelInterrupted},
		{supervisor.Reply{}, fmt.Errorf("chat a: %w", supervisor.ErrQueueFull), LabelBusy},
		{supervisor.Reply{}, fmt.Errorf("chat a: %w", supervisor.ErrNoSlot), LabelBusy},
		{supervisor.Reply{}, fmt.Errorf("x: %w", appserver.ErrOverloaded), LabelBusy},
		{supervisor.Reply{}, fmt.Errorf("chat a: dropped: %w", supervisor.ErrStopped), LabelStopped},
		// A message superseded under --busy interrupt is not a failure (issue 17, item 10).
		{supervisor.Reply{TurnID: "t"}, fmt.Errorf("chat a: %w", supervisor.ErrSuperseded), LabelSuperseded},
		{supervisor.Reply{}, supervisor.ErrClosed, LabelClosed},
		{supervisor.Reply{}, &supervisor.CrashLoopError{ChatKey: "a", Err: errors.New("boom")}, LabelCrashLoop},
		{supervisor.Reply{}, &supervisor.WatchdogError{ChatKey: "a", Watchdog: supervisor.WatchdogTurn, Err: errors.New("late")}, "watchdog_turn_deadline"},
		{supervisor.Reply{}, &supervisor.WatchdogError{ChatKey: "a", Watchdog: "memory", Err: errors.New("x")}, "watchdog_other"},
		{supervisor.Reply{}, errors.New("chat canvas:secret-text: something odd"), LabelError},
	} {
		if got := OutcomeLabel(tc.r, tc.err); got != tc.want {
			t.Errorf("OutcomeLabel(%+v, %v) = %q, want %q", tc.r, tc.err, got, tc.want)
		}
	}
}
