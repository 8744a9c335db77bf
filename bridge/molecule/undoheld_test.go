package molecule

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/supervisor"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// jobControls are Controls with /compact and /undo that record the calls.
type jobControls struct {
	*chattest.Controls
	mu    sync.Mutex
	calls []string
}

func (c *jobControls) Compact(_ context.Context, key string) (chatjob.CompactResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "compact "+key)
	return chatjob.CompactResult{}, nil
}

func (c *jobControls) Undo(_ context.Context, key string, _ int) (chatjob.UndoResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "undo "+key)
	return chatjob.UndoResult{Messages: []string{"earlier"}}, nil
}

// A message this inbox still holds (the pool has no slot: it waits to be tried again) is a
// message of the chat that waits, though the supervisor has nothing of the chat yet: /undo is
// refused, and takes nothing back behind it.
func TestUndoRefusedWhileTheInboxHoldsAMessage(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	synctest.Test(t, func(t *testing.T) {
		a := newBusyAnswerer(supervisor.ErrNoSlot)
		ctl := &jobControls{Controls: &chattest.Controls{}}
		_, stop := bubbleInbox(t, p, t.TempDir(), a, func(cfg *Config) { cfg.Controls = ctl })
		p.Enqueue(moleculetest.CanvasMessage("hi"))
		time.Sleep(5 * time.Second)
		if len(a.attempts()) == 0 {
			t.Fatal("the message was never tried")
		}
		p.Enqueue(moleculetest.CanvasMessage("/undo"))
		time.Sleep(5 * time.Second)
		got := p.Notifies()
		if len(got) != 1 || !strings.HasPrefix(got[0].Message, "not now") {
			t.Errorf("answers while the message waits: %+v, want /undo refused as busy", got)
		}
		ctl.mu.Lock()
		if len(ctl.calls) != 0 {
			t.Errorf("calls %v: /undo reached the supervisor while the inbox held a message of the chat", ctl.calls)
		}
		ctl.mu.Unlock()
		close(a.free)
		time.Sleep(2 * DefaultRetryMax)
		stop()
	})
}
