package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/protocol"
)

// tripError is the cancel cause of a turn ended by a watchdog.
type tripError struct {
	watchdog string
	after    time.Duration
}

func (e *tripError) Error() string {
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

// postToolWatch trips WatchdogPostTool when a tool item completed and no notification of the turn
// followed within quiet.
type postToolWatch struct {
	quiet  time.Duration
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func (p *postToolWatch) observe(n protocol.Notification) {
	if p.quiet <= 0 {
		return
	}
	tool := n.Method == protocol.NotifyItemCompleted && isToolItem(n.Params)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	if !tool {
		return
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(p.quiet, func() {
			p.cancel(&tripError{watchdog: WatchdogPostTool, after: p.quiet})
		})
	} else {
		p.timer.Reset(p.quiet)
	}
}

func (p *postToolWatch) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
}

func isToolItem(params json.RawMessage) bool {
	var n struct {
		Item struct {
			Type string `json:"type"`
		} `json:"item"`
	}
	if json.Unmarshal(params, &n) != nil {
		return false
	}
	switch n.Item.Type {
	case protocol.ItemCommandExecution, protocol.ItemFileChange, protocol.ItemMCPToolCall, protocol.ItemDynamicToolCall:
		return true
	}
	return false
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
