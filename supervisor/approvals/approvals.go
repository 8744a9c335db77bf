// Package approvals is the board of the approvals that wait for a person: a running turn's
// request, published for its chat, shown by the chat's inbox and decided by the chat's answer.
// Their numbers order them across every chat and survive a reload. The board has its own lock,
// so that a chat's commands never wait on the supervisor's.
package approvals

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
)

// ErrNone: no approval with the number given, or none at all, waits for the chat's answer.
var ErrNone = errors.New("no such approval is waiting for this chat's answer")

// ErrWhich: several approvals wait for the chat's answer and the answer named none.
var ErrWhich = errors.New("several approvals are waiting for this chat's answer: say which")

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

// Pending is an Approval and the channel its answer arrives on.
type Pending struct {
	Approval
	answer chan string // buffered 1: Answer never blocks
}

// Answer decides p; it never blocks, and p's turn takes the decision from Answered.
func (p *Pending) Answer(decision string) { p.answer <- decision }

// Answered is where p's decision arrives.
func (p *Pending) Answered() <-chan string { return p.answer }

// Board holds the pending approvals of every chat, oldest first. They are few (one per
// running turn, rarely more), so lookups scan. It has its own lock so that the chat's commands
// never wait on the supervisor's.
type Board struct {
	mu      sync.Mutex
	seq     uint64
	pending []*Pending
	changed chan struct{} // closed and replaced whenever an approval is published
	// reuse are the numbers of approvals a previous image of the daemon published, by chat key
	// and request id: asked again after a reload, an approval keeps its number.
	reuse map[string]uint64
}

// SeqsOf returns the numbers of chatKey's pending approvals by request id.
func (b *Board) SeqsOf(chatKey string) map[string]uint64 {
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

// Keep makes chatKey's approvals of these request ids keep their numbers when published.
func (b *Board) Keep(chatKey string, seqs map[string]uint64) {
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

func New() *Board {
	return &Board{changed: make(chan struct{})}
}

func (b *Board) Publish(chatKey, askedOf string, req appserver.ApprovalRequest, timeout time.Duration) *Pending {
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
	p := &Pending{
		Approval: Approval{ApprovalRequest: req, ChatKey: chatKey, AskedOf: askedOf, Seq: seq, Asked: now, Expires: now.Add(timeout)},
		answer:   make(chan string, 1),
	}
	b.pending = append(b.pending, p)
	close(b.changed)
	b.changed = make(chan struct{})
	return p
}

func (b *Board) Remove(p *Pending) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = slices.DeleteFunc(b.pending, func(q *Pending) bool { return q == p })
}

// askedOfLocked returns the approvals whose prompt went to chat by, oldest first.
func (b *Board) askedOfLocked(by string) []*Pending {
	var out []*Pending
	for _, p := range b.pending {
		if p.AskedOf == by {
			out = append(out, p)
		}
	}
	return out
}

// AskedOf returns the approvals waiting for chat by's answer, oldest first.
func (b *Board) AskedOf(by string) []Approval {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Approval
	for _, p := range b.askedOfLocked(by) {
		out = append(out, p.Approval)
	}
	return out
}

// Wait returns the first pending approval of chatKey's turns with a Seq above after, waiting
// for one to be published until ctx is done.
func (b *Board) Wait(ctx context.Context, chatKey string, after uint64) (Approval, error) {
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

// Take takes the approval n (0: the only one) waiting for chat by's answer off the board, at
// once, so that a second answer cannot decide it again.
func (b *Board) Take(by string, n uint64) (*Pending, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := b.askedOfLocked(by)
	var p *Pending
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
		return nil, fmt.Errorf("chat %s: %d approvals: %w", by, len(list), ErrWhich)
	}
	if p == nil {
		return nil, fmt.Errorf("chat %s: approval %d: %w", by, n, ErrNone)
	}
	b.pending = slices.DeleteFunc(b.pending, func(q *Pending) bool { return q == p })
	return p, nil
}
