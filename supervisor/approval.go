package supervisor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/protocol"
)

// Approvals asked in the chat (appserver.DecisionAsk): a turn's approval request is published
// for its chat key, the chat's inbox shows it, and the chat's /approve or /deny (Answer) decides
// it. Nobody answering within Config.ApprovalTimeout declines it. While it waits, the turn's
// watchdogs are paused (turnWatch).

// DefaultApprovalTimeout is how long an approval waits for the chat's answer before it is
// declined.
const DefaultApprovalTimeout = 10 * time.Minute

// Approval is an approval request of a chat's running turn, waiting for the chat's answer.
type Approval struct {
	appserver.ApprovalRequest
	ChatKey string
	// Seq orders the approvals of all chats: a later one has a larger Seq. WaitApproval uses it.
	Seq uint64
	// Asked is when it was published; Expires is when it is declined unanswered.
	Asked   time.Time
	Expires time.Time
}

// pendingApproval is an Approval and the channel its answer arrives on.
type pendingApproval struct {
	Approval
	answer chan string // buffered 1: Answer never blocks
}

// approvalBoard holds the pending approvals, oldest first per chat key. It has its own lock so
// that the chat's commands never wait on the supervisor's.
type approvalBoard struct {
	mu      sync.Mutex
	seq     uint64
	pending map[string][]*pendingApproval
	changed chan struct{} // closed and replaced whenever an approval is published
}

func newApprovalBoard() *approvalBoard {
	return &approvalBoard{pending: make(map[string][]*pendingApproval), changed: make(chan struct{})}
}

func (b *approvalBoard) publish(chatKey string, req appserver.ApprovalRequest, timeout time.Duration) *pendingApproval {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	now := time.Now()
	p := &pendingApproval{
		Approval: Approval{ApprovalRequest: req, ChatKey: chatKey, Seq: b.seq, Asked: now, Expires: now.Add(timeout)},
		answer:   make(chan string, 1),
	}
	b.pending[chatKey] = append(b.pending[chatKey], p)
	close(b.changed)
	b.changed = make(chan struct{})
	return p
}

func (b *approvalBoard) remove(p *pendingApproval) {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := slices.DeleteFunc(b.pending[p.ChatKey], func(q *pendingApproval) bool { return q == p })
	if len(list) == 0 {
		delete(b.pending, p.ChatKey)
		return
	}
	b.pending[p.ChatKey] = list
}

// AsksApprovals reports whether approvals are asked in the chat: the children's policy leaves
// commands or file changes to a person (appserver.DecisionAsk). Otherwise /approve and /deny have
// nothing to answer, and the chat is not offered them.
func (s *Supervisor) AsksApprovals() bool {
	p := s.cfg.AppServer.Policy
	return p.Command == appserver.DecisionAsk || p.FileChange == appserver.DecisionAsk
}

// PendingApproval returns chatKey's oldest approval waiting for an answer.
func (s *Supervisor) PendingApproval(chatKey string) (Approval, bool) {
	b := s.approvals
	b.mu.Lock()
	defer b.mu.Unlock()
	if list := b.pending[chatKey]; len(list) > 0 {
		return list[0].Approval, true
	}
	return Approval{}, false
}

// WaitApproval returns chatKey's first pending approval with a Seq above after, waiting for one
// to be published until ctx is done. An inbox calls it beside Submit to show the chat what its
// turn asks.
func (s *Supervisor) WaitApproval(ctx context.Context, chatKey string, after uint64) (Approval, error) {
	b := s.approvals
	for {
		b.mu.Lock()
		for _, p := range b.pending[chatKey] {
			if p.Seq > after {
				b.mu.Unlock()
				return p.Approval, nil
			}
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return Approval{}, fmt.Errorf("chat %s: wait for an approval: %w", chatKey, context.Cause(ctx))
		}
	}
}

// Answer decides chatKey's oldest pending approval: protocol.DecisionAccept,
// DecisionAcceptForSession or DecisionDecline. It returns the approval answered; ok is false when
// none was waiting. It does not wait behind the chat's queue.
func (s *Supervisor) Answer(chatKey, decision string) (Approval, bool) {
	b := s.approvals
	b.mu.Lock()
	list := b.pending[chatKey]
	if len(list) == 0 {
		b.mu.Unlock()
		return Approval{}, false
	}
	p := list[0]
	// Taken off the board at once, so that a second /approve answers the next one.
	b.pending[chatKey] = list[1:]
	if len(list) == 1 {
		delete(b.pending, chatKey)
	}
	b.mu.Unlock()
	p.answer <- decision
	s.log.Info("chat answered an approval", zap.String("chat_key", chatKey), zap.String("decision", decision),
		zap.String("request_id", p.RequestID), zap.String("kind", p.Kind))
	return p.Approval, true
}

// approver is the appserver.Approver of a turn of chatKey: it publishes each request, pauses the
// turn's watchdogs and waits for the chat's Answer, the approval timeout or the turn's end.
func (s *Supervisor) approver(chatKey string, sess *session, watch *turnWatch) appserver.Approver {
	return func(ctx context.Context, req appserver.ApprovalRequest) (string, error) {
		resume := watch.waitOnPerson()
		defer resume()
		timeout := s.cfg.ApprovalTimeout
		p := s.approvals.publish(chatKey, req, timeout)
		defer s.approvals.remove(p)
		log := sess.log.With(zap.String("request_id", req.RequestID), zap.String("kind", req.Kind))
		log.Info("approval asked in the chat", zap.String("command", req.Command), zap.Duration("timeout", timeout))
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case d := <-p.answer:
			return d, nil
		case <-timer.C:
			log.Info("nobody answered the approval; declining", zap.Duration("timeout", timeout))
			return protocol.DecisionDecline, nil
		case <-ctx.Done():
			return "", fmt.Errorf("chat %s: approval %s: %w", chatKey, req.RequestID, context.Cause(ctx))
		}
	}
}
