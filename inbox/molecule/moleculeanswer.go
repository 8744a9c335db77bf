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

	"github.com/molecule-ai/codex-warm/chatfiles"
	"github.com/molecule-ai/codex-warm/inbox/chat"
	"github.com/molecule-ai/codex-warm/inbox/molecule/platform"
	"github.com/molecule-ai/codex-warm/supervisor"
)

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
// the two does not run codex again. It reports false when shutdown cut the turn off, or came
// while the pool was busy: the row then stays unacknowledged and the next run answers it.
func (m *Inbox) answer(ctx, drainCtx context.Context, log *zap.Logger, msg message) (*pendingReply, bool) {
	start := time.Now()
	var relay sync.WaitGroup
	relayCtx, stopRelay := context.WithCancel(drainCtx)
	if m.cfg.Controls != nil {
		relay.Go(func() { m.relayApprovals(relayCtx, log, msg) })
	}
	m.startProgressNotes(relayCtx, &relay, log, msg, start)
	q := m.newChips(msg)
	m.startChips(relayCtx, &relay, log, msg, q)
	turnCtx := m.withChips(drainCtx, q)
	reply, err := m.submit(ctx, drainCtx, log, msg, 0, func() (supervisor.Reply, error) { return m.submitInput(turnCtx, msg) })
	stopRelay()
	relay.Wait()
	return m.settle(ctx, drainCtx, log, msg, start, reply, err)
}

// handOff gives msg to HandOff on the chat's queue, so the chat's messages reach the supervisor
// in order, and waits for its reply on a goroutine of its own: the chat's next message need not
// wait for it. A chat whose queue is full waits like a busy Submit (on the chat's queue, so
// the order holds); a pool that has no slot later answers busy.
func (m *Inbox) handOff(ctx, drainCtx context.Context, log *zap.Logger, msg message) {
	start := time.Now()
	var ticket *supervisor.Ticket
	q := m.newChips(msg)
	turnCtx := m.withChips(drainCtx, q)
	_, err := m.submit(ctx, drainCtx, log, msg, 0, func() (supervisor.Reply, error) {
		// Not before the chat's earlier messages that wait: it would overtake them.
		if err := m.line.await(ctx, msg.ChatKey, 0); err != nil {
			return supervisor.Reply{ChatKey: msg.ChatKey}, fmt.Errorf("%w: %w", err, supervisor.ErrClosed)
		}
		var err error
		ticket, err = m.cfg.HandOff.EnqueueInput(turnCtx, msg.ChatKey, m.input(msg))
		return supervisor.Reply{ChatKey: msg.ChatKey}, err
	})
	seq := m.line.next()
	if ticket == nil {
		m.images.release(msg.imageBytes())
		if p, ok := m.settle(ctx, drainCtx, log, msg, start, supervisor.Reply{ChatKey: msg.ChatKey}, err); ok {
			m.deliver(drainCtx, log, *p)
		}
		return
	}
	m.mu.Lock()
	m.inflight[msg.ActivityID] = msg.ChatKey
	m.mu.Unlock()
	m.handed.Go(func() {
		var relay sync.WaitGroup
		relayCtx, stopRelay := context.WithCancel(drainCtx)
		if m.cfg.Controls != nil {
			relay.Go(func() { m.relayApprovals(relayCtx, log, msg) })
		}
		m.startProgressNotes(relayCtx, &relay, log, msg, start)
		m.startChips(relayCtx, &relay, log, msg, q)
		// The first try is the ticket at hand; a message that has to wait is handed over again.
		first := true
		reply, err := m.submit(ctx, drainCtx, log, msg, seq, func() (supervisor.Reply, error) {
			if first {
				first = false
				return ticket.Wait()
			}
			t, err := m.cfg.HandOff.EnqueueInput(turnCtx, msg.ChatKey, m.input(msg))
			m.line.set(msg.ChatKey, seq, false) // in the supervisor's queue: later ones may follow
			if err != nil {
				return supervisor.Reply{ChatKey: msg.ChatKey}, err
			}
			return t.Wait()
		})
		stopRelay()
		relay.Wait()
		m.images.release(msg.imageBytes())
		m.mu.Lock()
		delete(m.inflight, msg.ActivityID)
		m.mu.Unlock()
		if p, ok := m.settle(ctx, drainCtx, log, msg, start, reply, err); ok {
			m.deliver(drainCtx, log, *p)
		}
	})
}

// input is what codex gets for msg, with the party its approvals are asked of: the workspace's
// canvas user, whatever row msg is (see approvalParty).
func (m *Inbox) input(msg message) supervisor.Input {
	in := msg.input()
	in.AskApprovalsOf = m.approvalParty().ChatKey
	in.CallTool = m.sendFileTool(msg)
	return in
}

// settle turns a Submit result into msg's stored reply (see answer).
func (m *Inbox) settle(ctx, drainCtx context.Context, log *zap.Logger, msg message, start time.Time, reply supervisor.Reply, err error) (*pendingReply, bool) {
	oc := chat.Classify(reply, err)
	if oc == chat.OutcomeClosed || (oc != chat.OutcomeAnswered && drainCtx.Err() != nil) {
		m.c.abandoned.Add(1)
		log.Info("stopping before the message was answered; it will be answered after the restart", zap.Error(err))
		m.takeBox(msg.ActivityID) // its files go with the answer the next run gives
		m.removeOutbox(msg.ActivityID)
		return nil, false
	}
	m.c.answered.Add(1)
	// A message the chat stopped is not a failure of codex.
	failed := oc != chat.OutcomeAnswered && oc != chat.OutcomeStopped && oc != chat.OutcomeSuperseded
	text := chat.ReplyText(reply, err)
	if reply.Steered {
		text = steeredText(oc, reply, err)
	}
	reply.Notices = append(slices.Clip(reply.Notices), msg.Notices...)
	text = reply.WithNotices(text) // images and files codex was not given
	text, files := withFiles(m.takeBox(msg.ActivityID), text)
	// A stopped turn sends none of its files: /stop asks for the work to end, not for what it
	// had made so far. The reply names them and keeps the refusals (they say why a file did not
	// come), and the copies leave the outbox now rather than at delivery. A turn a newer message
	// interrupted (--busy interrupt) sends its files, as a failed turn does: nobody asked to
	// drop its work, and the agent answering the newer message in the same thread was told
	// they would go.
	if oc == chat.OutcomeStopped {
		text = withoutFiles(text, files, chatfiles.WhyStopped)
		files = nil
		m.removeOutbox(msg.ActivityID)
	}
	// Redacted because codex may have seen the token (an inherited environment, a tool's output)
	// and error texts can quote request headers: it must not reach a user or a peer.
	text = chat.Truncate(m.red.String(text), m.cfg.MaxReplyBytes, "reply")
	m.noteAnswer(failed, text)
	switch {
	case oc == chat.OutcomeStopped:
		log.Info("stopped from the chat", zap.String("turn_id", reply.TurnID))
	case oc == chat.OutcomeSuperseded:
		log.Info("interrupted by a newer message", zap.String("turn_id", reply.TurnID))
	case failed:
		m.c.codexFailures.Add(1)
		log.Warn("codex did not answer; replying with what went wrong",
			zap.String("status", reply.Status), zap.String("turn_error", reply.Error), zap.Error(err))
	default:
		log.Info("codex answered", zap.String("thread_id", reply.ThreadID), zap.String("turn_id", reply.TurnID),
			zap.Duration("took", time.Since(start)))
	}
	p := m.pendingReply(msg, text)
	if len(files) > 0 {
		p.Files = files
		m.ledger.setPending(*p)
	}
	m.syncReplies(log)
	return p, true
}

// storeReply makes text msg's pending reply and stores it durably before it is delivered.
func (m *Inbox) storeReply(log *zap.Logger, msg message, text string) *pendingReply {
	p := m.pendingReply(msg, text)
	m.syncReplies(log)
	return p
}

// pendingReply makes text msg's pending reply in the ledger, not yet written to disk
// (syncReplies writes it).
func (m *Inbox) pendingReply(msg message, text string) *pendingReply {
	p := &pendingReply{
		ActivityID: msg.ActivityID,
		ChatKey:    msg.ChatKey,
		Route:      msg.Route,
		Text:       text,
		MessageID:  platform.ReplyID(m.cfg.WorkspaceID, msg.ActivityID),
		AnsweredAt: time.Now().UTC(),
		InReplyTo:  msg.MessageID,
	}
	m.ledger.setPending(*p)
	return p
}

// syncReplies writes the ledger with the replies made so far, before they are delivered.
// They are delivered anyway when the write fails: a crash before delivery would answer the
// message again, which is better than not answering it.
func (m *Inbox) syncReplies(log *zap.Logger) {
	m.syncState(log, "storing the reply before delivery (delivering anyway; a crash now would answer the message again)")
}

// command carries out a chat command on the chat's command queue, beside its running turn, and
// delivers the answer like a reply. /stop also drops the chat's messages this inbox has not
// handed to the supervisor yet; each gets a short note, so every row is answered and
// acknowledged.
//
// The answer and every note are stored in one ledger write before the first is sent: the
// decision to drop a message must outlive a crash while the platform refuses the answer, or the
// next run would find the dropped rows unanswered and run them.
func (m *Inbox) command(ctx context.Context, log *zap.Logger, disp *dispatcher, j job) {
	var dropped []job
	if j.cmd.Name == chat.CmdStop {
		dropped = disp.dropMessages(j.msg.ChatKey)
	}
	ctl := m.cfg.Controls
	if j.resetQueued {
		ctl = queuedResetControls{ctl}
	}
	text := chat.RunCommand(ctx, ctl, j.msg.ChatKey, *j.cmd, len(dropped))
	m.c.commands.Add(1)
	log.Info("chat command", zap.String("command", j.cmd.Name), zap.Int("dropped_here", len(dropped)))
	text = chat.Truncate(m.red.String(text), m.cfg.MaxReplyBytes, "reply")
	answer := m.pendingReply(j.msg, text)
	note := chat.ReplyText(supervisor.Reply{}, supervisor.ErrStopped)
	notes := make([]*pendingReply, 0, len(dropped))
	for _, d := range dropped {
		m.images.release(d.msg.imageBytes())
		notes = append(notes, m.pendingReply(d.msg, note))
	}
	m.syncReplies(log)
	m.deliver(ctx, log, *answer)
	for _, p := range notes {
		m.deliver(ctx, m.log.With(zap.String("chat_key", p.ChatKey), zap.String("activity_id", p.ActivityID)), *p)
	}
}

// submitInput runs msg's turn once through the Answerer, with msg in flight meanwhile.
func (m *Inbox) submitInput(drainCtx context.Context, msg message) (supervisor.Reply, error) {
	m.mu.Lock()
	m.inflight[msg.ActivityID] = msg.ChatKey
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.inflight, msg.ActivityID)
		m.mu.Unlock()
	}()
	return m.cfg.Answerer.SubmitInput(drainCtx, msg.ChatKey, m.input(msg))
}
