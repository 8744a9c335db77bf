package supervisor

import (
	"context"
	"errors"
	"fmt"
)

// freeze is the handover's state in the table: a reload's freeze, the children it paused, the
// turns it handed over and those no caller waits for. Only its own methods change it; the
// table's transitions below are how the handover (handover.go) and the chats reach it.
type freeze struct {
	// freezing while Freeze waits for quiet, frozen once it refuses messages.
	freezing bool
	frozen   bool
	// paused are the children Freeze paused.
	paused []pausable
	// handed are the running jobs a freeze handed over (their callers were told
	// ErrHandedOver); detached are the jobs no caller waits for, by message id, which a
	// message of the same id attaches to (EnqueueInput): a turn handed over by the previous
	// image, or one whose reload was called off.
	handed   []*job
	detached map[string]*job
	// changed wakes Freeze's wait for quiet.
	changed chan struct{}
}

// refusing reports whether messages are refused (ErrReloading): frozen.
func (f *freeze) refusing() bool { return f.frozen }

// active reports whether a freeze began (spares are not started, maintenance is refused).
func (f *freeze) active() bool { return f.freezing || f.frozen }

// begin starts a freeze: the wait for quiet.
func (f *freeze) begin() { f.freezing = true }

// refuse marks the wait for quiet over: messages are refused from now on.
func (f *freeze) refuse() { f.frozen = true }

// end calls the freeze off (failed, or thawed) and returns the children it paused and the jobs
// it handed over.
func (f *freeze) end() ([]pausable, []*job) {
	paused, handed := f.paused, f.handed
	f.freezing, f.frozen = false, false
	f.paused, f.handed = nil, nil
	return paused, handed
}

// keep records what a freeze that succeeded paused and handed over.
func (f *freeze) keep(paused []pausable, handed []*job) { f.paused, f.handed = paused, handed }

// attach takes the detached job of messageID when it is chatKey's (nil otherwise).
func (f *freeze) attach(chatKey, messageID string) *job {
	d := f.detached[messageID]
	if messageID == "" || d == nil || d.key.key != chatKey {
		return nil
	}
	delete(f.detached, messageID)
	return d
}

// detach keeps j for the message that attaches to it (EnqueueInput).
func (f *freeze) detach(j *job) {
	if f.detached == nil {
		f.detached = make(map[string]*job)
	}
	f.detached[j.messageID] = j
}

// changedCh returns a channel closed at the next change of a child's state or of a chat's work
// (notify).
func (f *freeze) changedCh() <-chan struct{} {
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

// notify wakes Freeze's wait for quiet.
func (f *freeze) notify() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// beginFreeze starts a freeze, unless the supervisor is closed or frozen already.
func (t *table) beginFreeze() error {
	switch {
	case t.closed:
		return ErrClosed
	case t.freeze.freezing:
		return errors.New("supervisor: already frozen")
	}
	t.freeze.begin()
	return nil
}

// endFreeze calls a freeze off and returns what it paused and handed over; Thaw detaches the
// handed-over jobs, whose callers were told ErrHandedOver: the message given again attaches to
// its turn.
func (t *table) endFreeze(thaw bool) []pausable {
	paused, handed := t.freeze.end()
	if thaw {
		for _, j := range handed {
			t.freeze.detach(j)
		}
	}
	return paused
}

// runningTurn is a chat's running turn that a reload can hand over.
type runningTurn struct {
	sess *session
	job  *job
	live *liveTurn
}

// quiet is one look of Freeze's wait for quiet (awaitQuiet): the idle children and the running
// turns that can cross, what is still busy, and what can never cross. With nothing busy and
// nothing that cannot cross, the supervisor is frozen: it refuses messages from now on.
type quiet struct {
	idle         []*session
	running      []runningTurn
	busy, cannot []string
	changed      <-chan struct{} // closed at the next change, for the next look
}

// retireSpares retires the ready spares (spares are not handed over); those starting are waited
// for.
func (t *table) retireSpares(reason string) {
	for sess := range t.sessions {
		if sess.spare && sess.state == StateSpare {
			t.retire(sess, reason, nil)
		}
	}
}

// lookQuiet sorts every session and key for the freeze (see quiet); it changes nothing but the
// freeze's refusing, once quiet. A job in ended, whose turn ended as its child paused, is waited
// for like any work.
func (t *table) lookQuiet(ended map[*job]bool) quiet {
	var q quiet
	for sess := range t.sessions {
		switch {
		case sess.spare: // retiring (retireSpares), or starting
			q.busy = append(q.busy, "a spare "+string(sess.state))
		case sess.state == StateIdle && !t.busy(sess.key.key):
			q.idle = append(q.idle, sess)
		case sess.state == StateBusy && !ended[sess.key.running] && t.handable(sess.key):
			q.running = append(q.running, runningTurn{sess: sess, job: sess.key.running, live: sess.key.live})
		case sess.state == StateBusy && t.neverCrosses(sess.key) != "":
			q.cannot = append(q.cannot, fmt.Sprintf("chat %s: %s", sess.key.key, t.neverCrosses(sess.key)))
		default:
			q.busy = append(q.busy, fmt.Sprintf("chat %s %s", sess.key.key, sess.state))
		}
	}
	for _, k := range t.keys {
		if t.busy(k.key) && (k.sess == nil || k.sess.state == StateIdle) {
			q.busy = append(q.busy, "chat "+k.key+" has work")
		}
	}
	if len(q.busy) == 0 && len(q.cannot) == 0 {
		t.freeze.refuse()
	}
	q.changed = t.freeze.changedCh()
	return q
}

// handable reports whether k's running turn can cross a reload.
func (t *table) handable(k *keyState) bool {
	j := k.running
	if j == nil || j.reset || j.messageID == "" || k.live == nil {
		return false
	}
	if k.live.steered() > 0 {
		return false
	}
	ok := true
	t.queue.EachLocked(k.key, func(q *job) {
		if q.messageID == "" || q.reset {
			ok = false
		}
	})
	return ok
}

// neverCrosses says why k's running turn cannot be handed over for as long as it runs (its
// message, or one queued behind it, has no id the inbox could give again, or is a /new, or a
// message was steered into it); "" when it can, or may once its turn id is known.
func (t *table) neverCrosses(k *keyState) string {
	j := k.running
	if j == nil {
		return ""
	}
	switch {
	case j.reset:
		return "a new session is being started"
	case j.messageID == "":
		return "its caller cannot be handed over (an event stream, or a message without an id)"
	}
	if k.live != nil && k.live.steered() > 0 {
		return "a message was steered into its turn"
	}
	why := ""
	t.queue.EachLocked(k.key, func(q *job) {
		if why == "" && (q.messageID == "" || q.reset) {
			why = "a message queued behind its turn cannot be handed over"
		}
	})
	return why
}

// handOver completes a freeze that paused every child: it keeps what was paused and handed
// over, tells the handed-over jobs' callers (the turns no longer end with them), and takes the
// messages queued behind the running turns out of their queues: they have ids too (lookQuiet),
// and their inbox gives them again, in order, to the next image.
func (t *table) handOver(paused []pausable, handed []*job, running []runningTurn) {
	t.freeze.keep(paused, handed)
	for _, j := range handed {
		// The caller stops waiting; the turn no longer ends with it.
		j.unlink()
		close(j.handed)
	}
	for _, r := range running {
		for _, q := range t.takeQueued(r.sess.key.key) {
			close(q.handed)
		}
	}
}

// adoptTurn makes the running turn handed over with k's child k's first job: its message
// attaches to it when its inbox gives it again, and the messages after it queue behind.
func (t *table) adoptTurn(k *keyState, ht *HandedTurn) {
	j := &job{key: k, ctx: context.Background(), done: make(chan outcome, 1), messageID: ht.MessageID,
		handed: make(chan struct{}), turnStarted: ht.Started,
		opts: turnOptions{askApprovalsOf: ht.AskApprovalsOf, resume: true, deadlineLeft: ht.DeadlineLeft}}
	if j.messageID != "" {
		t.freeze.detach(j)
	}
	t.queue.PushLocked(k.key, j)
}

func joinFirst(items []string, n int) string {
	out := ""
	for i, it := range items {
		if i == n {
			return fmt.Sprintf("%s and %d more", out, len(items)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += it
	}
	return out
}
