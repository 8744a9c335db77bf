// Package chattest holds test doubles of what the inboxes call: an Answerer that records its
// calls and can be held with a Gate, and Controls that records chat commands. Tests of
// inbox/chat, inbox/molecule and inbox/local share them; the binary never links this package.
package chattest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// Call is one SubmitInput seen by an Answerer.
type Call struct {
	Key, Text string
	Images    []string
}

// Answerer is a deterministic chat.Answerer. By default it answers EchoReply; the function given
// to NewAnswerer overrides that. It records calls in order and the highest concurrency overall
// and per chat key.
type Answerer struct {
	mu        sync.Mutex
	fn        func(ctx context.Context, key, text string) (supervisor.Reply, error)
	calls     []Call
	inflight  map[string]int
	total     int
	maxTotal  int
	maxPerKey int
	finished  int
	changed   chan struct{}
}

// NewAnswerer returns an Answerer that answers with fn, or with EchoReply when fn is nil.
func NewAnswerer(fn func(ctx context.Context, key, text string) (supervisor.Reply, error)) *Answerer {
	return &Answerer{fn: fn, inflight: make(map[string]int), changed: make(chan struct{})}
}

// EchoReply is the completed turn that answers text with "echo: <text>".
func EchoReply(key, text string) supervisor.Reply {
	return supervisor.Reply{ChatKey: key, ThreadID: "thread-" + key, TurnID: "turn-1", Text: "echo: " + text,
		Status: "completed", Duration: 42 * time.Millisecond}
}

func (a *Answerer) broadcastLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// SubmitInput records the call and answers it.
func (a *Answerer) SubmitInput(ctx context.Context, key string, in supervisor.Input) (supervisor.Reply, error) {
	text := in.Text
	a.mu.Lock()
	a.calls = append(a.calls, Call{key, text, in.Images})
	a.inflight[key]++
	a.total++
	a.maxTotal = max(a.maxTotal, a.total)
	a.maxPerKey = max(a.maxPerKey, a.inflight[key])
	fn := a.fn
	a.broadcastLocked()
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inflight[key]--
		a.total--
		a.finished++
		a.broadcastLocked()
		a.mu.Unlock()
	}()
	if fn != nil {
		return fn(ctx, key, text)
	}
	return EchoReply(key, text), nil
}

// Calls returns the calls so far, in order.
func (a *Answerer) Calls() []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// Snapshot returns the calls running now, the most that ran at once overall and for one key, and
// how many have returned.
func (a *Answerer) Snapshot() (inflight, maxTotal, maxPerKey, finished int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total, a.maxTotal, a.maxPerKey, a.finished
}

// WaitFor returns once cond holds, re-checking after every call's start and end.
func (a *Answerer) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		a.mu.Lock()
		ch := a.changed
		a.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fake answerer: condition not met: %w", ctx.Err())
		case <-ch:
		}
	}
}

// Gate blocks calls until opened; tests use it to hold turns in flight.
type Gate struct {
	ch   chan struct{}
	once sync.Once
}

// NewGate returns a closed gate.
func NewGate() *Gate { return &Gate{ch: make(chan struct{})} }

// Wait returns once g is open, or with ctx's error.
func (g *Gate) Wait(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Open lets every waiting and later call through; opening twice is harmless.
func (g *Gate) Open() { g.once.Do(func() { close(g.ch) }) }

// GatedAnswerer echoes every message once g opens.
func GatedAnswerer(g *Gate) *Answerer {
	return NewAnswerer(func(ctx context.Context, key, text string) (supervisor.Reply, error) {
		if err := g.Wait(ctx); err != nil {
			return supervisor.Reply{}, err
		}
		return EchoReply(key, text), nil
	})
}

// Controls is a chat.Controls that answers with its fields and records the calls that change or
// read a chat in Log ("stop <key>", "reset <key>", "status <key>", "answer <key> <decision>"). It
// is not safe for concurrent use.
type Controls struct {
	StopResult  supervisor.StopResult
	ResetResult supervisor.ResetResult
	ResetErr    error
	Row         supervisor.ChildStatus
	RowOK       bool
	LastErr     string
	Log         []string

	Approval   supervisor.Approval
	ApprovalOK bool
	// Asks is what AsksApprovals returns: approvals are asked in the chat.
	Asks bool
}

// AsksApprovals returns Asks.
func (f *Controls) AsksApprovals() bool { return f.Asks }

// Stop records the call and returns StopResult.
func (f *Controls) Stop(key string) supervisor.StopResult {
	f.Log = append(f.Log, "stop "+key)
	return f.StopResult
}

// Reset records the call and returns ResetResult and ResetErr.
func (f *Controls) Reset(_ context.Context, key string) (supervisor.ResetResult, error) {
	f.Log = append(f.Log, "reset "+key)
	return f.ResetResult, f.ResetErr
}

// ChatStatus records the call and returns Row, RowOK and LastErr.
func (f *Controls) ChatStatus(key string) (supervisor.ChildStatus, bool, string) {
	f.Log = append(f.Log, "status "+key)
	return f.Row, f.RowOK, f.LastErr
}

// Answer records the call ("answer <key> <n> <decision>") and returns Approval, or
// supervisor.ErrNoApproval when ApprovalOK is false.
func (f *Controls) Answer(key string, n uint64, decision string) (supervisor.Approval, error) {
	f.Log = append(f.Log, fmt.Sprintf("answer %s %d %s", key, n, decision))
	if !f.ApprovalOK {
		return supervisor.Approval{}, supervisor.ErrNoApproval
	}
	return f.Approval, nil
}

// PendingApprovals returns Approval when ApprovalOK.
func (f *Controls) PendingApprovals(string) []supervisor.Approval {
	if !f.ApprovalOK {
		return nil
	}
	return []supervisor.Approval{f.Approval}
}

// WaitApproval waits for ctx: no approval ever comes.
func (f *Controls) WaitApproval(ctx context.Context, _ string, _ uint64) (supervisor.Approval, error) {
	<-ctx.Done()
	return supervisor.Approval{}, ctx.Err()
}
