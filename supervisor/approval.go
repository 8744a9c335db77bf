package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
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
	// ChatKey is the chat whose turn asks.
	ChatKey string
	// AskedOf is the chat shown the prompt: only its /approve and /deny answer it (see
	// Input.AskApprovalsOf). It is ChatKey unless the inbox chose another party.
	AskedOf string
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

// approvalBoard holds the pending approvals of every chat, oldest first. They are few (one per
// running turn, rarely more), so lookups scan. It has its own lock so that the chat's commands
// never wait on the supervisor's.
type approvalBoard struct {
	mu      sync.Mutex
	seq     uint64
	pending []*pendingApproval
	changed chan struct{} // closed and replaced whenever an approval is published
	// reuse are the numbers of approvals a previous image of the daemon published, by chat key
	// and request id: asked again after a reload, an approval keeps its number.
	reuse map[string]uint64
}

// seqsOf returns the numbers of chatKey's pending approvals by request id.
func (b *approvalBoard) seqsOf(chatKey string) map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out map[string]uint64
	for _, p := range b.pending {
		if p.ChatKey == chatKey {
			if out == nil {
				out = make(map[string]uint64)
			}
			out[p.RequestID] = p.Seq
		}
	}
	return out
}

// keep makes chatKey's approvals of these request ids keep their numbers when published.
func (b *approvalBoard) keep(chatKey string, seqs map[string]uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, n := range seqs {
		if b.reuse == nil {
			b.reuse = make(map[string]uint64)
		}
		b.reuse[chatKey+"\x00"+id] = n
		b.seq = max(b.seq, n)
	}
}

func newApprovalBoard() *approvalBoard {
	return &approvalBoard{changed: make(chan struct{})}
}

func (b *approvalBoard) publish(chatKey, askedOf string, req appserver.ApprovalRequest, timeout time.Duration) *pendingApproval {
	b.mu.Lock()
	defer b.mu.Unlock()
	seq, kept := b.reuse[chatKey+"\x00"+req.RequestID]
	if kept {
		delete(b.reuse, chatKey+"\x00"+req.RequestID)
	} else {
		b.seq++
		seq = b.seq
	}
	now := time.Now()
	p := &pendingApproval{
		Approval: Approval{ApprovalRequest: req, ChatKey: chatKey, AskedOf: askedOf, Seq: seq, Asked: now, Expires: now.Add(timeout)},
		answer:   make(chan string, 1),
	}
	b.pending = append(b.pending, p)
	close(b.changed)
	b.changed = make(chan struct{})
	return p
}

func (b *approvalBoard) remove(p *pendingApproval) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = slices.DeleteFunc(b.pending, func(q *pendingApproval) bool { return q == p })
}

// askedOfLocked returns the approvals whose prompt went to chat by, oldest first.
func (b *approvalBoard) askedOfLocked(by string) []*pendingApproval {
	var out []*pendingApproval
	for _, p := range b.pending {
		if p.AskedOf == by {
			out = append(out, p)
		}
	}
	return out
}

// AsksApprovals reports whether approvals are asked in the chat: the children's policy leaves
// commands or file changes to a person (appserver.DecisionAsk). Otherwise /approve and /deny have
// nothing to answer, and the chat is not offered them.
func (s *Supervisor) AsksApprovals() bool {
	p := s.cfg.AppServer.Policy
	return p.Command == appserver.DecisionAsk || p.FileChange == appserver.DecisionAsk
}

// PendingApproval returns the oldest approval waiting for chat by's answer: one whose prompt
// went to by, whichever chat's turn asks.
func (s *Supervisor) PendingApproval(by string) (Approval, bool) {
	if list := s.PendingApprovals(by); len(list) > 0 {
		return list[0], true
	}
	return Approval{}, false
}

// PendingApprovals returns the approvals waiting for chat by's answer, oldest first.
func (s *Supervisor) PendingApprovals(by string) []Approval { return s.approvals.askedOf(by) }

// WaitApproval returns the first pending approval of chatKey's turns (Approval.ChatKey) with a
// Seq above after, waiting for one to be published until ctx is done. An inbox calls it beside
// Submit to show the party asked what the chat's turn asks.
func (s *Supervisor) WaitApproval(ctx context.Context, chatKey string, after uint64) (Approval, error) {
	return s.approvals.wait(ctx, chatKey, after)
}

// ErrNoApproval: no approval with the number given, or none at all, waits for the chat's answer.
var ErrNoApproval = errors.New("no such approval is waiting for this chat's answer")

// ErrWhichApproval: several approvals wait for the chat's answer and the answer named none.
var ErrWhichApproval = errors.New("several approvals are waiting for this chat's answer: say which")

// Answer decides an approval waiting for chat by's answer (see PendingApprovals):
// protocol.DecisionAccept, DecisionAcceptForSession or DecisionDecline. n is the approval's
// number (its Seq, which its prompt shows); 0 answers the only one waiting, and fails with
// ErrWhichApproval when several are, so that an answer meant for one prompt never lands on
// another. An approval asked of another chat is never answered from by, also when by is the chat
// whose turn asks (ErrNoApproval). It returns the approval answered and does not wait behind the
// chat's queue.
func (s *Supervisor) Answer(by string, n uint64, decision string) (Approval, error) {
	p, err := s.approvals.take(by, n)
	if err != nil {
		return Approval{}, err
	}
	p.answer <- decision
	s.log.Info("chat answered an approval", zap.String("chat_key", p.ChatKey), zap.String("answered_by", by),
		zap.Uint64("approval", p.Seq), zap.String("decision", decision), zap.String("request_id", p.RequestID),
		zap.String("kind", p.Kind))
	return p.Approval, nil
}

// askedOf returns the approvals waiting for chat by's answer, oldest first.
func (b *approvalBoard) askedOf(by string) []Approval {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Approval
	for _, p := range b.askedOfLocked(by) {
		out = append(out, p.Approval)
	}
	return out
}

// wait returns the first pending approval of chatKey's turns with a Seq above after, waiting
// for one to be published until ctx is done.
func (b *approvalBoard) wait(ctx context.Context, chatKey string, after uint64) (Approval, error) {
	for {
		b.mu.Lock()
		for _, p := range b.pending {
			if p.ChatKey == chatKey && p.Seq > after {
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

// take takes the approval n (0: the only one) waiting for chat by's answer off the board, at
// once, so that a second answer cannot decide it again.
func (b *approvalBoard) take(by string, n uint64) (*pendingApproval, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := b.askedOfLocked(by)
	var p *pendingApproval
	switch {
	case n != 0:
		for _, q := range list {
			if q.Seq == n {
				p = q
			}
		}
	case len(list) == 1:
		p = list[0]
	case len(list) > 1:
		return nil, fmt.Errorf("chat %s: %d approvals: %w", by, len(list), ErrWhichApproval)
	}
	if p == nil {
		return nil, fmt.Errorf("chat %s: approval %d: %w", by, n, ErrNoApproval)
	}
	b.pending = slices.DeleteFunc(b.pending, func(q *pendingApproval) bool { return q == p })
	return p, nil
}

// MaxApprovalCommandBytes is the longest command (and working directory) a person is asked to
// approve: the prompt shows it whole, and a longer one is declined without asking (unshowable).
// It fits a chat message and a person's reading; a script longer than this belongs in a file the
// person can read, which codex can be asked to write first.
const MaxApprovalCommandBytes = 2000

// unshowable says why req cannot be shown whole in a prompt, or "" when it can. Collapsing white
// space or showing head and tail would change or hide what runs (a newline is a command
// separator; the middle of a long command can hold anything), so what cannot be shown whole is
// not offered at all.
func unshowable(req appserver.ApprovalRequest) string {
	switch {
	case len(req.Command) > MaxApprovalCommandBytes:
		return fmt.Sprintf("codex asked to run a command of %d bytes, too long to show whole in an approval prompt (at most %d); it did not run. Ask codex to write it to a file you can read first, or to run shorter commands",
			len(req.Command), MaxApprovalCommandBytes)
	case len(req.Cwd) > MaxApprovalCommandBytes:
		return fmt.Sprintf("codex asked to run a command in a directory whose name is %d bytes, too long to show whole in an approval prompt (at most %d); it did not run",
			len(req.Cwd), MaxApprovalCommandBytes)
	}
	return ""
}

// turnNotes collects the notices of one turn (Reply.Notices) from its approver, which runs on
// codex's request goroutines.
type turnNotes struct {
	mu   sync.Mutex
	list []string
}

func (n *turnNotes) add(note string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = append(n.list, note)
}

func (n *turnNotes) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.list)
}
