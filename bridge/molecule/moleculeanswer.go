package molecule

// The answering half of the Molecule inbox: a message's turn (with busy retries, or handed off
// under a busy policy), its stored reply, and the chat commands that run beside it.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// answerer runs a message's turn (Submit, or handed off under a busy policy), waits while it
// cannot be answered now, and stores the reply for delivery. mu guards inflight.
type answerer struct {
	deps
	images  *imageBudget
	peers   *peerExchanges
	pause   *pauseGate
	window  *answerWindow
	waits   *waits     // the turn's wait while the message cannot be answered now (waiting.go)
	view    *turnView  // what a running turn shows the chat
	replies *replies   // the files a turn sends
	wakeAck func()     // the cursor may have moved: the feed acks
	line    handedLine // the order of handed-over messages that wait

	mu       sync.Mutex
	inflight map[string]string // activity id → chat key, for running turns
}

func newAnswerer(sh shared, r *replies, v *turnView, wakeAck func()) *answerer {
	return &answerer{deps: sh.deps, images: sh.images, peers: sh.peers, pause: sh.pause, window: sh.window,
		waits: newWaits(sh.deps, r), view: v, replies: r, wakeAck: wakeAck, inflight: make(map[string]string)}
}

// busy says how many messages are being answered, and the first of their chat keys.
func (a *answerer) busy() (n int, first string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range a.inflight {
		if first == "" || key < first {
			first = key
		}
	}
	return len(a.inflight), first
}

// toSend is what the answerer hands back for handle to deliver: the reply (its text, route and
// files), already stored in the ledger, and the notes that follow it (the answers of the
// messages a /stop dropped). The answerer never delivers: handle does, on every path, so a
// reply leaves from one place.
type toSend struct {
	reply ledger.Reply
	notes []ledger.Reply
}

// Enqueuer hands a message over without waiting for its reply (*supervisor.Supervisor): the
// ticket's Wait returns it. Messages of a chat enqueued one after another keep their order.
type Enqueuer interface {
	EnqueueInput(ctx context.Context, chatKey string, in supervisor.Input) (*supervisor.Ticket, error)
}

// textSteered answers a message added to the chat's running turn (--busy steer): the full reply
// goes to the message that started the turn.
const textSteered = "(added to the running turn; codex answered it together with the message before it)"

// textSteeredStopped answers a message added to the chat's running turn when /stop ended that
// turn: codex did not answer it, and the partial text went to the message that started the turn.
const textSteeredStopped = "stopped: this message had joined the running turn, which /stop ended; what codex had written so far went to the message before it."

// steeredText is what a message added to another message's turn is answered, by that turn's
// outcome. Only a turn that completed answered it; a turn that failed failed it too, and the
// failure's own text says what to do.
func steeredText(oc chat.Outcome, reply supervisor.Reply, err error) string {
	switch oc {
	case chat.OutcomeAnswered:
		// The message that started the turn gets the reply; posting it twice helps nobody.
		return textSteered
	case chat.OutcomeStopped:
		return textSteeredStopped
	}
	return chat.ReplyText(reply, err)
}

// answer runs the turn and stores the reply durably before it is delivered, so a crash between
// the two does not run codex again, and returns it for handle to deliver. It reports false when shutdown cut the turn off, or came
// while the pool was busy: the row then stays unacknowledged and the next run answers it.
func (a *answerer) answer(ctx, drainCtx context.Context, log *zap.Logger, msg message) (toSend, bool) {
	start := time.Now()
	turnCtx, q := a.view.open(drainCtx, msg)
	stop := a.view.show(drainCtx, log, msg, start, q)
	// Each try is an attempt of its own, with its own send_file box (input).
	reply, err := a.submit(ctx, drainCtx, log, msg, 0, func() (supervisor.Reply, error) { return a.submitInput(turnCtx, msg, a.input(msg)) })
	stop()
	return a.settle(ctx, drainCtx, log, msg, start, reply, err)
}

// handOff gives msg to HandOff on the chat's queue, so the chat's messages reach the supervisor
// in order. A chat whose queue is full waits like a busy Submit (on the chat's queue, so the
// order holds); a pool that has no slot later answers busy. When the hand-over failed, what to
// deliver is returned at once (ok says there is something). Otherwise later is set: the caller
// runs it on a goroutine of its own, so the chat's next message need not wait for this one's
// reply, and it returns what to deliver once the turn's result is in. Either way msg's images
// are released once its reply is settled.
func (a *answerer) handOff(ctx, drainCtx context.Context, log *zap.Logger, msg message) (now toSend, ok bool, later func() (toSend, bool)) {
	start := time.Now()
	var ticket *supervisor.Ticket
	turnCtx, q := a.view.open(drainCtx, msg)
	_, err := a.submit(ctx, drainCtx, log, msg, 0, func() (supervisor.Reply, error) {
		// Not before the chat's earlier messages that wait: it would overtake them.
		if err := a.line.await(ctx, msg.ChatKey, 0); err != nil {
			return supervisor.Reply{ChatKey: msg.ChatKey}, fmt.Errorf("%w: %w", err, supervisor.ErrClosed)
		}
		var err error
		ticket, err = a.cfg.HandOff.EnqueueInput(turnCtx, msg.ChatKey, a.input(msg))
		return supervisor.Reply{ChatKey: msg.ChatKey}, err
	})
	seq := a.line.next()
	if ticket == nil {
		a.images.release(msg.ImageBytes())
		now, ok = a.settle(ctx, drainCtx, log, msg, start, supervisor.Reply{ChatKey: msg.ChatKey}, err)
		return now, ok, nil
	}
	a.mu.Lock()
	a.inflight[msg.ActivityID] = msg.ChatKey
	a.mu.Unlock()
	return toSend{}, false, func() (toSend, bool) {
		stop := a.view.show(drainCtx, log, msg, start, q)
		// The first try is the ticket at hand; a message that has to wait is handed over again.
		first := true
		reply, err := a.submit(ctx, drainCtx, log, msg, seq, func() (supervisor.Reply, error) {
			if first {
				first = false
				return ticket.Wait()
			}
			t, err := a.cfg.HandOff.EnqueueInput(turnCtx, msg.ChatKey, a.input(msg))
			a.line.set(msg.ChatKey, seq, false) // in the supervisor's queue: later ones may follow
			if err != nil {
				return supervisor.Reply{ChatKey: msg.ChatKey}, err
			}
			return t.Wait()
		})
		stop()
		a.images.release(msg.ImageBytes())
		a.mu.Lock()
		delete(a.inflight, msg.ActivityID)
		a.mu.Unlock()
		return a.settle(ctx, drainCtx, log, msg, start, reply, err)
	}
}

// input is what codex gets for an attempt at msg, with the party its approvals are asked of:
// the workspace's canvas user, whatever row msg is (see approvalParty), and the attempt's own
// send_file box.
func (a *answerer) input(msg message) supervisor.Input {
	in := codexInput(msg)
	in.AskApprovalsOf = a.view.approvalParty().ChatKey
	in.CallTool = a.replies.sendFileTool(msg)
	return in
}

// settle turns a Submit result into msg's stored reply (see answer).
func (a *answerer) settle(ctx, drainCtx context.Context, log *zap.Logger, msg message, start time.Time, reply supervisor.Reply, err error) (toSend, bool) {
	oc := chat.Classify(reply, err)
	if oc == chat.OutcomeClosed || (oc != chat.OutcomeAnswered && drainCtx.Err() != nil) {
		a.c.abandoned.Add(1)
		log.Info("stopping before the message was answered; it will be answered after the restart", zap.Error(err))
		a.replies.takeBox(msg.ActivityID) // its files are dropped: the next run answers it again
		a.replies.removeOutbox(msg.ActivityID)
		return toSend{}, false
	}
	a.c.answered.Add(1)
	// A message the chat stopped is not a failure of codex.
	failed := oc != chat.OutcomeAnswered && oc != chat.OutcomeStopped && oc != chat.OutcomeSuperseded
	text := chat.ReplyText(reply, err)
	if reply.Steered {
		text = steeredText(oc, reply, err)
	}
	reply.Notices = append(slices.Clip(reply.Notices), msg.Notices...)
	text = reply.WithNotices(text) // images and files codex was not given
	text, files := withFiles(a.replies.takeBox(msg.ActivityID), text)
	// A stopped turn sends none of its files: /stop asks for the work to end, not for what it
	// had made so far. The reply names them and keeps the refusals (they say why a file did not
	// come), and the copies leave the outbox now rather than at delivery. A turn a newer message
	// interrupted (--busy interrupt) sends its files, as a failed turn does: nobody asked to
	// drop its work, and the agent answering the newer message in the same thread was told
	// they would go.
	if oc == chat.OutcomeStopped {
		text = withoutFiles(text, files, chatfiles.WhyStopped)
		files = nil
		a.replies.removeOutbox(msg.ActivityID)
	}
	// Redacted because codex may have seen the token (an inherited environment, a tool's output)
	// and error texts can quote request headers: it must not reach a user or a peer.
	text = chat.Truncate(a.red.String(text), a.cfg.MaxReplyBytes, "reply")
	a.window.note(failed, text)
	switch {
	case oc == chat.OutcomeStopped:
		log.Info("stopped from the chat", zap.String("turn_id", reply.TurnID))
	case oc == chat.OutcomeSuperseded:
		log.Info("interrupted by a newer message", zap.String("turn_id", reply.TurnID))
	case failed:
		a.c.codexFailures.Add(1)
		log.Warn("codex did not answer; replying with what went wrong",
			zap.String("status", reply.Status), zap.String("turn_error", reply.Error), zap.Error(err))
	default:
		log.Info("codex answered", zap.String("thread_id", reply.ThreadID), zap.String("turn_id", reply.TurnID),
			zap.Duration("took", time.Since(start)))
	}
	p := a.pendingReply(msg, text)
	if len(files) > 0 {
		p.Files = files
		a.ledger.SetPending(*p)
	}
	a.syncReplies(log)
	return toSend{reply: *p}, true
}

// storeReply makes text msg's pending reply and stores it durably before it is delivered.
func (a *answerer) storeReply(log *zap.Logger, msg message, text string) *ledger.Reply {
	p := a.pendingReply(msg, text)
	a.syncReplies(log)
	return p
}

// pendingReply makes text msg's pending reply in the ledger, not yet written to disk
// (syncReplies writes it).
func (a *answerer) pendingReply(msg message, text string) *ledger.Reply {
	p := &ledger.Reply{
		ActivityID: msg.ActivityID,
		ChatKey:    msg.ChatKey,
		Route:      msg.Route,
		Text:       text,
		MessageID:  platform.ReplyID(a.cfg.WorkspaceID, msg.ActivityID),
		AnsweredAt: time.Now().UTC(),
		InReplyTo:  msg.MessageID,
	}
	a.ledger.SetPending(*p)
	return p
}

// syncReplies writes the ledger with the replies made so far, before they are delivered.
// They are delivered anyway when the write fails: a crash before delivery would answer the
// message again, which is better than not answering it.
func (a *answerer) syncReplies(log *zap.Logger) {
	a.state.sync(log, "storing the reply before delivery (delivering anyway; a crash now would answer the message again)")
}

// command carries out a chat command on the chat's command queue, beside its running turn, and
// returns its answer to deliver like a reply. /stop also drops the chat's messages this inbox has not
// handed to the supervisor yet; each gets a short note, so every row is answered and
// acknowledged.
//
// The answer and every note are stored in one ledger write before the first is sent: the
// decision to drop a message must outlive a crash while the platform refuses the answer, or the
// next run would find the dropped rows unanswered and run them.
func (a *answerer) command(ctx context.Context, log *zap.Logger, disp *dispatcher, j job) toSend {
	var dropped []job
	if j.cmd.Name == chat.CmdStop {
		dropped = disp.dropMessages(j.msg.ChatKey)
	}
	ctl := a.cfg.Controls
	if j.resetQueued {
		ctl = queuedResetControls{ctl}
	}
	if j.cmd.Name == chat.CmdUndo && disp.holds(j.msg.ChatKey) {
		ctl = heldUndoControls{ctl}
	}
	text := chat.RunCommand(ctx, ctl, j.msg.ChatKey, *j.cmd, len(dropped))
	a.c.commands.Add(1)
	log.Info("chat command", zap.String("command", j.cmd.Name), zap.Int("dropped_here", len(dropped)))
	text = chat.Truncate(a.red.String(text), a.cfg.MaxReplyBytes, "reply")
	answer := a.pendingReply(j.msg, text)
	note := chat.ReplyText(supervisor.Reply{}, supervisor.ErrStopped)
	notes := make([]ledger.Reply, 0, len(dropped))
	for _, d := range dropped {
		a.images.release(d.msg.ImageBytes())
		notes = append(notes, *a.pendingReply(d.msg, note))
	}
	a.syncReplies(log)
	return toSend{reply: *answer, notes: notes}
}

// answerNotices answers msg, left with nothing for codex (no text, none of its files taken),
// with its notices alone: a turn would only be told what went wrong.
func (a *answerer) answerNotices(log *zap.Logger, msg message) toSend {
	a.c.answered.Add(1)
	a.window.note(true, "none of the message's files could be taken")
	log.Info("message answered without a turn: it has no text and none of its files could be taken")
	text := "None of the files of this message could be taken, and it has no text to answer:"
	for _, n := range msg.Notices {
		text += "\n\n[" + n + "]"
	}
	text = chat.Truncate(a.red.String(text), a.cfg.MaxReplyBytes, "reply")
	return toSend{reply: *a.storeReply(log, msg, text)}
}
