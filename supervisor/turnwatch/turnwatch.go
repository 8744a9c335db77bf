// Package turnwatch runs one turn's watchdogs: the turn deadline, the post-tool quiet, the
// model that cannot be reached or never answers. Each ends the turn through the cancel function
// it is given, with a *TripError; all of them are paused while the turn waits on a person.
package turnwatch

import (
	"context"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor/progress"
)

// Watch runs one turn's watchdogs: the turn deadline (Deadline) and the post-tool quiet
// watch (PostTool). Both are paused while the turn waits on a person: while codex
// reports the thread waitingOnApproval or waitingOnUserInput (thread/status/changed), and while
// an approval of the turn waits for the chat's answer. A person taking minutes to answer is
// not a hung child. The time spent waiting does not count against the deadline; the quiet watch
// starts over when the wait ends.
//
// The post-tool watch trips when a tool item (commandExecution, fileChange, mcpToolCall,
// dynamicToolCall) completed and no notification of the thread followed within quiet. Every
// notification the turn receives counts as activity (reasoning deltas, token usage, status
// changes, items started), not only items.
type Watch struct {
	cancel context.CancelCauseFunc

	mu sync.Mutex
	// deadline is the turn deadline; left is what remains of it, as of since while it runs.
	deadline  time.Duration
	left      time.Duration
	since     time.Time
	turnTimer *time.Timer
	// quiet is the post-tool quiet; armed is true from a tool item's completion until the next
	// notification.
	quiet     time.Duration
	armed     bool
	quietTime *time.Timer
	// unreach is how long the model may stay unreachable; unreachTimer runs from codex's first
	// report of it until anything else arrives.
	unreach      time.Duration
	unreachTimer *time.Timer
	// silentTimer runs from the turn's start until the model's first answer (expectModel).
	silentTimer *time.Timer
	// flagged: codex says the thread waits on a person; asking: approvals waiting for the chat.
	flagged bool
	asking  int
	stopped bool
}

// New starts the watchdogs of a turn; a zero or negative duration disables one (but a
// zero unreach trips at codex's first report that the model is unreachable). cancel ends the
// turn with a *TripError.
func New(deadline, quiet, unreach time.Duration, cancel context.CancelCauseFunc) *Watch {
	w := &Watch{cancel: cancel, deadline: deadline, left: deadline, quiet: quiet, unreach: unreach}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.resumeLocked()
	return w
}

func (w *Watch) pausedLocked() bool { return w.flagged || w.asking > 0 }

// resumeLocked (re)starts the timers that should run now.
func (w *Watch) resumeLocked() {
	if w.stopped || w.pausedLocked() {
		return
	}
	if w.deadline > 0 && w.turnTimer == nil {
		w.since = time.Now()
		d := w.deadline
		w.turnTimer = time.AfterFunc(w.left, func() { w.cancel(&TripError{Watchdog: Deadline, After: d}) })
	}
	if w.quiet > 0 && w.armed && w.quietTime == nil {
		q := w.quiet
		w.quietTime = time.AfterFunc(q, func() { w.cancel(&TripError{Watchdog: PostTool, After: q}) })
	}
}

// pauseLocked stops the timers, keeping what is left of the deadline.
func (w *Watch) pauseLocked() {
	if w.turnTimer != nil {
		if w.turnTimer.Stop() {
			w.left -= time.Since(w.since)
		}
		w.turnTimer = nil
	}
	w.stopQuietLocked()
}

func (w *Watch) stopQuietLocked() {
	if w.quietTime != nil {
		w.quietTime.Stop()
		w.quietTime = nil
	}
}

// observe takes each notification of the turn (TurnOptions.OnNotification).
func (w *Watch) Observe(n protocol.Notification) {
	tool := n.Method == protocol.NotifyItemCompleted && progress.IsToolItem(n.Params)
	cause, unreachable := appserver.ModelUnreachable(n)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.heardModelLocked(n)
	switch {
	case unreachable && w.unreachTimer == nil && w.unreach >= 0:
		u := w.unreach
		w.unreachTimer = time.AfterFunc(u, func() {
			w.cancel(&TripError{Watchdog: ModelUnreachable, After: u, Cause: cause})
		})
	case !unreachable && n.Method != protocol.NotifyError && w.unreachTimer != nil:
		// Something came from the model (or codex moved on): it is reachable.
		w.unreachTimer.Stop()
		w.unreachTimer = nil
	}
	// Any notification is activity: the quiet watch waits for the next tool.
	w.stopQuietLocked()
	w.armed = tool
	if n.Method == protocol.NotifyThreadStatus {
		w.flagged = progress.WaitingOnPerson(n.Params)
	}
	if w.pausedLocked() {
		w.pauseLocked()
		return
	}
	w.resumeLocked()
}

// waitOnPerson marks the start (and, through the returned func, the end) of an approval of the
// turn waiting for the chat's answer.
func (w *Watch) WaitOnPerson() (done func()) {
	w.mu.Lock()
	w.asking++
	w.pauseLocked()
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.asking--
		w.resumeLocked()
	}
}

// stop ends the watchdogs; later notifications change nothing.
func (w *Watch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pauseLocked()
	if w.unreachTimer != nil {
		w.unreachTimer.Stop()
		w.unreachTimer = nil
	}
	if w.silentTimer != nil {
		w.silentTimer.Stop()
		w.silentTimer = nil
	}
	w.stopped = true
}

// leftNow is what remains of the turn deadline (0 when there is none), for a turn handed over
// by a reload.
func (w *Watch) LeftNow() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deadline <= 0 {
		return 0
	}
	left := w.left
	if w.turnTimer != nil {
		left -= time.Since(w.since)
	}
	return max(left, time.Millisecond)
}

// carryOver makes the deadline end when it would have in the previous image of the daemon:
// left remains of it (0: all of it).
func (w *Watch) CarryOver(left time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deadline <= 0 || left <= 0 || left >= w.deadline {
		return
	}
	w.pauseLocked()
	w.left = left
	w.resumeLocked()
}
