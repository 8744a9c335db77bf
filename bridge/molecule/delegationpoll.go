package molecule

// Delegation rows after their events. The platform broadcasts DELEGATION_COMPLETE or
// DELEGATION_FAILED just before it writes the delegate_result row (workspace-server
// handlers/delegation.go: the broadcast, then the insert), so the poll the event wakes may find
// nothing yet. After such an event the poll runs again a few times soon after (delegationRepolls)
// until the row is read, then leaves it to the safety poll.

import (
	"context"
	"time"

	"github.com/molecule-ai/codex-warm/internal/idring"
)

// delegationRepolls are when, after a DELEGATION_* event whose row is not read yet, the poll
// runs again, counted from the event.
var delegationRepolls = []time.Duration{500 * time.Millisecond, 2 * time.Second, 5 * time.Second}

// delegationReadMemory is how many delegation ids of rows read are remembered, so that an event
// that comes after its row starts no re-polls.
const delegationReadMemory = 256

// delegationWatch re-polls after DELEGATION_* events until their rows are read. The stream tells
// it of events (announced), the feed of the rows it reads (read); the state is its run
// goroutine's alone.
type delegationWatch struct {
	announced chan string // delegation ids of DELEGATION_* events ("" when the event has none)
	read      chan string // delegation ids of delegate_result rows the poll read
	wake      func(pollCause)
}

func newDelegationWatch(wake func(pollCause)) *delegationWatch {
	return &delegationWatch{announced: make(chan string, 64), read: make(chan string, 64), wake: wake}
}

// announce tells w of a DELEGATION_* event. When w is behind, the event is left to the safety
// poll.
func (w *delegationWatch) announce(delegationID string) {
	select {
	case w.announced <- delegationID:
	default:
	}
}

// rowRead tells w the poll read msg; a delegation's result ends its re-polls.
func (w *delegationWatch) rowRead(msg message) {
	if msg.Kind != kindDelegationResult || msg.DelegationID == "" {
		return
	}
	select {
	case w.read <- msg.DelegationID:
	default:
	}
}

// delegationWait is an announced delegation whose row is not read yet.
type delegationWait struct {
	since time.Time // the event
	step  int       // the next re-poll's index in delegationRepolls
}

// run wakes the poll at each re-poll of each announced delegation whose row is not read yet,
// until ctx ends.
func (w *delegationWatch) run(ctx context.Context) {
	waiting := make(map[string]*delegationWait)
	read := idring.New(delegationReadMemory)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-w.announced:
			if id == "" || !read.Has(id) {
				// An event without an id cannot be told apart: its re-polls run whole.
				waiting[id] = &delegationWait{since: time.Now()}
			}
		case id := <-w.read:
			read.Add(id)
			delete(waiting, id)
		case <-timer.C:
		}
		timer.Stop()
		if next, ok := w.due(waiting, time.Now()); ok {
			timer.Reset(time.Until(next))
		}
	}
}

// due wakes the poll once if a re-poll of waiting is due at now, moves each such one to its next
// step (forgetting those past the last), and returns when the next re-poll is due.
func (w *delegationWatch) due(waiting map[string]*delegationWait, now time.Time) (next time.Time, ok bool) {
	woke := false
	for id, d := range waiting {
		at := d.since.Add(delegationRepolls[d.step])
		if !at.After(now) {
			if !woke {
				w.wake(causeEvent)
				woke = true
			}
			if d.step++; d.step == len(delegationRepolls) {
				delete(waiting, id)
				continue
			}
			at = d.since.Add(delegationRepolls[d.step])
		}
		if !ok || at.Before(next) {
			next, ok = at, true
		}
	}
	return next, ok
}
