package supervisor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"

	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor/turnwatch"
)

// TestClassifyTurn: each way a turn can end maps to the watchdog reported and the retirement
// of its child.
func TestClassifyTurn(t *testing.T) {
	t.Parallel()
	alive := &fakeChild{done: make(chan struct{})}
	dead := &fakeChild{done: make(chan struct{})}
	close(dead.done)
	postTool := &turnwatch.TripError{Watchdog: WatchdogPostTool, After: time.Second}
	turnDeadline := &turnwatch.TripError{Watchdog: WatchdogTurn, After: time.Minute}
	cases := []struct {
		name             string
		err, cause       error
		child            Child
		watchdog, retire string
	}{
		{"ok", nil, nil, dead, "", ""},
		{"wedged", fmt.Errorf("x: %w", appserver.ErrWedged), nil, alive, WatchdogWedged, WatchdogWedged},
		{"exited", fmt.Errorf("x: %w", appserver.ErrChildExited), nil, alive, WatchdogDead, WatchdogDead},
		{"child gone", context.Canceled, nil, dead, WatchdogDead, WatchdogDead},
		{"protocol", fmt.Errorf("x: %w", appserver.ErrProtocol), nil, alive, "", ReasonProtocol},
		// Retried to the bound in appserver: the child is fine, only busy.
		{"overloaded", fmt.Errorf("x: %w", appserver.ErrOverloaded), nil, alive, "", ""},
		{"post-tool", context.Canceled, postTool, alive, WatchdogPostTool, WatchdogPostTool},
		{"turn deadline", context.Canceled, turnDeadline, alive, WatchdogTurn, ""},
		{"caller left", context.Canceled, context.Canceled, alive, "", ""},
	}
	for _, c := range cases {
		w, r := classifyTurn(c.err, c.cause, c.child)
		if w != c.watchdog || r != c.retire {
			t.Errorf("%s: classifyTurn = (%q, %q), want (%q, %q)", c.name, w, r, c.watchdog, c.retire)
		}
	}
}

// TestIsCrash: start failures always count; a death counts only before the child was ready or
// within the crash window without a completed turn; planned retirements never do.
func TestIsCrash(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Second
	cases := []struct {
		reason    string
		ready     bool
		completed int
		age       time.Duration
		want      bool
	}{
		{ReasonStartFailed, false, 0, 0, true},
		{WatchdogHandshake, false, 0, 0, true},
		{WatchdogDead, false, 0, time.Hour, true},
		{WatchdogDead, true, 0, time.Second, true},
		{WatchdogDead, true, 0, time.Hour, false},
		{WatchdogDead, true, 1, time.Second, false},
		{WatchdogWedged, true, 0, time.Second, false},
		{ReasonIdle, true, 0, time.Second, false},
		{ReasonEvicted, false, 0, 0, false},
	}
	for _, c := range cases {
		if got := isCrash(c.reason, c.ready, c.completed, c.age, window); got != c.want {
			t.Errorf("isCrash(%s, ready=%v, completed=%d, age=%s) = %v, want %v", c.reason, c.ready, c.completed, c.age, got, c.want)
		}
	}
}

// TestCrashBackoff: crashes grow the wait up to the cap; reset clears it.
func TestCrashBackoff(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var c crashBackoff
	if w := c.wait(now); w != 0 {
		t.Fatalf("wait with no crash = %s, want 0", w)
	}
	cause := errors.New("boom")
	d1 := c.record(time.Second, 4*time.Second, cause, now)
	if d1 <= 0 || c.wait(now) != d1 || c.failures != 1 || c.lastErr != cause {
		t.Fatalf("after one crash: d=%s wait=%s failures=%d err=%v", d1, c.wait(now), c.failures, c.lastErr)
	}
	if w := c.wait(now.Add(d1)); w != 0 {
		t.Fatalf("wait once the backoff passed = %s, want 0", w)
	}
	for range 10 {
		c.record(time.Second, 4*time.Second, cause, now)
	}
	// The library adds up to 50% jitter to the capped interval.
	if w := c.wait(now); w > 6*time.Second {
		t.Fatalf("wait after many crashes = %s, want at most the 4s cap plus jitter", w)
	}
	c.reset()
	if c.failures != 0 || c.lastErr != nil || c.wait(now) != 0 {
		t.Fatalf("after reset: failures=%d err=%v wait=%s", c.failures, c.lastErr, c.wait(now))
	}
}

// unreachableNote is codex's report of a model it cannot reach (recorded on codex 0.169).
var unreachableNote = protocol.Notification{Method: protocol.NotifyError, Params: []byte(`{"error":{"additionalDetails":"Connection failed: error sending request","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}},"message":"Reconnecting... waiting for network"},"willRetry":true,"threadId":"t","turnId":"u"}`)}
