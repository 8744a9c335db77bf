package supervisor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/supervisor/approvals"
)

// Approvals asked in the chat (appserver.DecisionAsk): a turn's approval request is published
// for its chat key, the chat's inbox shows it, and the chat's /approve or /deny (Answer) decides
// it. Nobody answering within Config.ApprovalTimeout declines it. While it waits, the turn's
// watchdogs are paused (package turnwatch). The board is package approvals.

// DefaultApprovalTimeout is how long an approval waits for the chat's answer before it is
// declined.
const DefaultApprovalTimeout = 10 * time.Minute

// Approval is an approval request of a chat's running turn, waiting for the chat's answer
// (package approvals keeps the board).
type Approval = approvals.Approval

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
func (s *Supervisor) PendingApprovals(by string) []Approval { return s.approvals.AskedOf(by) }

// WaitApproval returns the first pending approval of chatKey's turns (Approval.ChatKey) with a
// Seq above after, waiting for one to be published until ctx is done. An inbox calls it beside
// Submit to show the party asked what the chat's turn asks.
func (s *Supervisor) WaitApproval(ctx context.Context, chatKey string, after uint64) (Approval, error) {
	return s.approvals.Wait(ctx, chatKey, after)
}

// ErrNoApproval: no approval with the number given, or none at all, waits for the chat's answer.
var ErrNoApproval = approvals.ErrNone

// ErrWhichApproval: several approvals wait for the chat's answer and the answer named none.
var ErrWhichApproval = approvals.ErrWhich

// Answer decides an approval waiting for chat by's answer (see PendingApprovals):
// protocol.DecisionAccept, DecisionAcceptForSession or DecisionDecline. n is the approval's
// number (its Seq, which its prompt shows); 0 answers the only one waiting, and fails with
// ErrWhichApproval when several are, so that an answer meant for one prompt never lands on
// another. An approval asked of another chat is never answered from by, also when by is the chat
// whose turn asks (ErrNoApproval). It returns the approval answered and does not wait behind the
// chat's queue.
func (s *Supervisor) Answer(by string, n uint64, decision string) (Approval, error) {
	p, err := s.approvals.Take(by, n)
	if err != nil {
		return Approval{}, err
	}
	p.Answer(decision)
	s.log.Info("chat answered an approval", zap.String("chat_key", p.ChatKey), zap.String("answered_by", by),
		zap.Uint64("approval", p.Seq), zap.String("decision", decision), zap.String("request_id", p.RequestID),
		zap.String("kind", p.Kind))
	return p.Approval, nil
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
