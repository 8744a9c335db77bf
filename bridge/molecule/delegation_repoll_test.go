package molecule

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// The platform broadcasts a delegation's event just before it writes the result's row, so the
// poll the event wakes can find nothing. A row that lands 1 s after its event is still answered
// within 3 s: the inbox polls again soon after such an event, not only at the safety poll (here
// 10 minutes away, so only those re-polls can find it).
func TestDelegationRowAfterItsEventAnsweredSoon(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		m, stop := bubbleInbox(t, p, t.TempDir(), chattest.NewAnswerer(nil), func(c *Config) {
			streamConfig(c)
			c.SafetyPollInterval = 10 * time.Minute
		})
		time.Sleep(time.Minute) // connected, caught up, settled
		if st := m.Stats().Stream.State; st != StreamConnected {
			t.Fatalf("stream %s after a minute, want connected", st)
		}
		land := p.AnnounceDelegation(moleculetest.DelegationResult(p.WorkspaceID(), "callee-1", "d-1", "the answer is 42"))
		time.Sleep(time.Second)
		land()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		n := p.Notifies()
		if len(n) != 1 || !strings.Contains(n[0].Message, "the answer is 42") {
			t.Errorf("3 s after the event (its row 1 s after it): replies %+v; want the delegation's answered", n)
		}
		// Once the row is read, no more re-polls: the next 10 minutes cost the safety poll alone.
		from := len(p.Calls())
		time.Sleep(10 * time.Minute)
		polls, _, _ := countCalls(p, from)
		if polls > 2 {
			t.Errorf("%d polls in the 10 minutes after the row was read, want at most 2", polls)
		}

		// A row that never comes (the platform writes it only with DELEGATION_RESULT_INBOX_PUSH):
		// the event's own poll and three re-polls, then the safety poll's.
		from = len(p.Calls())
		p.AnnounceDelegation(moleculetest.DelegationResult(p.WorkspaceID(), "callee-1", "d-2", "lost"))
		time.Sleep(time.Minute)
		polls, _, _ = countCalls(p, from)
		stop()
		if polls != 4 {
			t.Errorf("%d polls in the minute after an event whose row never came, want 4 (the event's and 3 re-polls)", polls)
		}
	})
}
