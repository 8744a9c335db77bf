package account

import (
	"testing"
	"time"

	"go.uber.org/zap"
)

// Once the model is known unreachable, turns trip at codex's first report; a completed turn
// ends the outage, which is counted once.
func TestModelStateTransitions(t *testing.T) {
	m := NewModel()
	log := zap.NewNop()
	if got := m.WatchFor(30 * time.Second); got != 30*time.Second {
		t.Fatalf("reachable: watchFor = %s", got)
	}
	m.Unreachable("Connection failed: dns error", log)
	m.Unreachable("Connection failed: dns error", log)
	st := m.Status()
	if !st.Unreachable || st.Outages != 1 || st.Cause != "Connection failed: dns error" || st.Since.IsZero() {
		t.Fatalf("after two unreachable turns: %+v", st)
	}
	if got := m.WatchFor(30 * time.Second); got != 0 {
		t.Errorf("unreachable: watchFor = %s, want 0", got)
	}
	if got := m.WatchFor(-1); got != -1 {
		t.Errorf("off stays off: watchFor = %s", got)
	}
	m.Reached(log)
	if st := m.Status(); st.Unreachable || st.Cause != "" || st.Outages != 1 {
		t.Errorf("after a completed turn: %+v", st)
	}
}
