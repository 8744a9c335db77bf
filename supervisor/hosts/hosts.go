// Package hosts places chats' threads in shared codex children (the supervisor's
// Config.ThreadsPerChild > 1): a part of the supervisor's pool with a lock of its own, below it.
package hosts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Shared children (Config.ThreadsPerChild > 1). The pool still thinks in sessions: a session is
// one chat's thread in a child, and its Child is a View, the chat's share of a host, the
// codex child several chats' threads live in. Closing a view lets its thread go (unsubscribe,
// then wait for codex to unload it: the thread has one writer, and the chat's next child may
// resume it only once this one let go); the host's child ends with its last view.
//
// A host takes threads while it is placing. It stops for good when it drains: recycling (its
// memory, age or turns), a thread wedged in it, a thread it could not let go. Its views are
// then retired as they go idle, and those still busy past the drain bound are interrupted; the
// chats' threads are resumed in other children by their next messages.

// Child is the part of *appserver.Client the supervisor uses. It is defined here, where it is
// consumed, so the pool logic can be tested with an in-memory child.
type Child interface {
	PID() int
	StartThread(ctx context.Context, opts appserver.ThreadOptions) (string, error)
	ResumeThread(ctx context.Context, threadID string, opts appserver.ThreadOptions) error
	// LastTurn returns the newest turn of the thread's persisted history (ok false: none).
	LastTurn(ctx context.Context, threadID string) (turn appserver.StoredTurn, ok bool, err error)
	// RevertThread drops turn beforeTurnID and every later turn from the thread's history.
	RevertThread(ctx context.Context, threadID, beforeTurnID string) error
	RunTurn(ctx context.Context, threadID string, input []protocol.UserInput, opts appserver.TurnOptions) (*appserver.TurnResult, error)
	// SteerTurn adds input to the running turn expectedTurnID (turn/steer); an error wrapping
	// appserver.ErrNotSteerable means codex refused it.
	SteerTurn(ctx context.Context, threadID, expectedTurnID string, input []protocol.UserInput) error
	// Done is closed when the child exited or its stream broke.
	Done() <-chan struct{}
	// Err says why Done was closed (nil before).
	Err() error
	LastActivity() time.Time
	// Close stops the child and returns only after it was reaped. It must be idempotent and
	// safe to call while RunTurn is in progress (RunTurn then returns an error).
	Close() error
}

// The appserver client is the production Child.
var _ Child = (*appserver.Client)(nil)

// SpawnFunc starts a child for a chat key and completes its handshake. It must return promptly
// once ctx is done: the supervisor enforces the handshake timeout through ctx.
type SpawnFunc func(ctx context.Context, chatKey string) (Child, error)

// hostState is a host's lifecycle: starting → placing → draining → ended; starting → ended
// when the child does not start.
type hostState string

const (
	hostStarting hostState = "starting"
	hostPlacing  hostState = "placing"
	hostDraining hostState = "draining"
	hostEnded    hostState = "ended"
)

var hostTransitions = map[hostState][]hostState{
	hostStarting: {hostPlacing, hostEnded},
	hostPlacing:  {hostDraining, hostEnded},
	hostDraining: {hostEnded},
	hostEnded:    nil,
}

// Host is one shared codex child.
type Host struct {
	id    uint64
	ready chan struct{} // closed once the child started (child set) or failed (err set)
	child Child
	err   error
	pid   int
	// own marks a child of one chat: one whose turns killed children before gets no
	// neighbours to take down with it (Pool.place).
	own bool

	// Guarded by Pool.mu.
	turns atomic.Int64 // turns its threads ran (ChildMaxTurns)

	state   hostState
	reason  string // why it drains
	views   int    // threads placed in it and not let go yet
	started time.Time
	left    chan struct{} // closed and replaced whenever a view leaves
}

// Config configures a Pool.
type Config struct {
	PerChild int
	Spawn    SpawnFunc
	Log      *zap.Logger
	// UnloadTimeout bounds a view's wait for its thread's thread/closed.
	UnloadTimeout time.Duration
	// Drain bounds how long a draining host waits for its other views to leave before its
	// child is closed under them.
	Drain time.Duration
	// OnDrain is called, without the pool's lock, when a thread that cannot leave made its
	// host drain (Close): the supervisor retires its idle views and interrupts the busy ones
	// past the bound. The supervisor's own drains (recycling) do that themselves.
	OnDrain func(h *Host)
}

// Pool places chats' threads in shared children. It has a lock of its own and never calls
// the supervisor while holding it; the supervisor calls it with or without its state table's lock.
type Pool struct {
	cfg Config

	mu     sync.Mutex
	hosts  map[*Host]struct{}
	last   map[string]*Host // the host each chat key's thread was last placed in
	nextID uint64
}

func New(cfg Config) *Pool {
	return &Pool{cfg: cfg, hosts: make(map[*Host]struct{}), last: make(map[string]*Host)}
}

func (p *Pool) setStateLocked(h *Host, to hostState) {
	for _, s := range hostTransitions[h.state] {
		if s == to {
			h.state = to
			return
		}
	}
	p.cfg.Log.DPanic("invalid host state transition", zap.Int("pid", h.pid),
		zap.String("from", string(h.state)), zap.String("to", string(to)))
}

// room reports whether h takes one more thread.
func (p *Pool) roomLocked(h *Host) bool {
	// A child that died has no room, even before its watcher ends the host: its threads are
	// retired one by one, and a thread placed in it meanwhile would fail to open.
	dead := h.child != nil && h.child.Err() != nil
	return (h.state == hostPlacing || h.state == hostStarting) && !h.own && h.views < p.cfg.PerChild && !dead
}

// Place gives chatKey's thread a place: a view on the host its thread was last in when that
// has room, else on the fullest host with room (fewer children, and emptier ones end sooner),
// else on a new child. own asks for a child of the chat's own. A spare (chatKey "") is a
// thread opened ahead in a child with room.
func (p *Pool) Place(ctx context.Context, chatKey string, own bool) (*View, error) {
	p.mu.Lock()
	var h *Host
	if !own {
		if l := p.last[chatKey]; chatKey != "" && l != nil && p.roomLocked(l) {
			h = l
		} else {
			for c := range p.hosts {
				if p.roomLocked(c) && (h == nil || c.views > h.views) {
					h = c
				}
			}
		}
	}
	spawn := h == nil
	if spawn {
		p.nextID++
		h = &Host{id: p.nextID, ready: make(chan struct{}), own: own, state: hostStarting, left: make(chan struct{})}
		p.hosts[h] = struct{}{}
	}
	h.views++
	if chatKey != "" {
		p.last[chatKey] = h
	}
	p.mu.Unlock()

	if spawn {
		// Started for no chat: the child serves several, so its lines name none.
		child, err := p.cfg.Spawn(ctx, "")
		if err == nil && child == nil {
			err = errors.New("spawn returned no child")
		}
		p.mu.Lock()
		if err != nil {
			h.err = err
			p.setStateLocked(h, hostEnded)
			delete(p.hosts, h)
		} else {
			h.child, h.pid, h.started = child, child.PID(), time.Now()
			p.setStateLocked(h, hostPlacing)
		}
		p.mu.Unlock()
		close(h.ready)
		if err == nil {
			p.cfg.Log.Info("shared codex child started", zap.Int("pid", h.pid), zap.Int("threads_per_child", p.cfg.PerChild), zap.Bool("own", own))
		}
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		p.giveUp(h)
		return nil, context.Cause(ctx)
	}
	if h.err != nil {
		p.giveUp(h)
		return nil, h.err
	}
	return &View{pool: p, host: h}, nil
}

// giveUp takes back a placement that is not used, closing the host's child when it was the
// last placement in it (a host still starting is left to its spawner, which holds one).
func (p *Pool) giveUp(h *Host) {
	if p.leave(h) == 0 && h.child != nil {
		_ = h.child.Close()
	}
}

// Adopt registers a child the previous image handed over with the threads threadIDs in it,
// placing, and returns a view for each.
func (p *Pool) Adopt(child Child, threadIDs []string) []*View {
	n := len(threadIDs)
	p.mu.Lock()
	p.nextID++
	h := &Host{id: p.nextID, ready: make(chan struct{}), child: child, pid: child.PID(), state: hostPlacing,
		views: n, started: time.Now(), left: make(chan struct{})}
	close(h.ready)
	p.hosts[h] = struct{}{}
	p.mu.Unlock()
	views := make([]*View, n)
	for i := range views {
		views[i] = &View{pool: p, host: h, thread: threadIDs[i]}
	}
	return views
}

// leave takes a view off h; the last view of a host that failed to start, or of an ended one,
// has nothing more to do. It reports how many views are left.
func (p *Pool) leave(h *Host) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.views--
	close(h.left)
	h.left = make(chan struct{})
	if h.views == 0 && h.state != hostStarting {
		if h.state != hostEnded {
			p.setStateLocked(h, hostEnded)
		}
		delete(p.hosts, h)
		for k, l := range p.last {
			if l == h {
				delete(p.last, k)
			}
		}
	}
	return h.views
}

// Drain makes h stop taking threads, for reason; the first reason wins. It reports whether
// this call began the drain: the caller then moves the host's threads out.
func (p *Pool) Drain(h *Host, reason string) bool {
	p.mu.Lock()
	if h.state != hostPlacing {
		p.mu.Unlock()
		return false
	}
	p.setStateLocked(h, hostDraining)
	h.reason = reason
	p.mu.Unlock()
	p.cfg.Log.Info("shared codex child drains: no new threads, its chats move to other children as they go idle",
		zap.Int("pid", h.pid), zap.String("reason", reason))
	return true
}

// Draining reports whether h takes no more threads.
func (p *Pool) Draining(h *Host) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return h.state != hostPlacing && h.state != hostStarting
}

// awaitAlone waits until v is the only view left on its host, or the drain bound passed.
func (p *Pool) awaitAlone(h *Host) {
	t := time.NewTimer(p.cfg.Drain)
	defer t.Stop()
	for {
		p.mu.Lock()
		n, left := h.views, h.left
		p.mu.Unlock()
		if n <= 1 {
			return
		}
		select {
		case <-left:
		case <-h.child.Done():
			return
		case <-t.C:
			return
		}
	}
}

// Threads is the number of views on h.
func (p *Pool) Threads(h *Host) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return h.views
}

// View is one chat's thread in a host: the Child of its session. Every call goes to the
// host's child; Close lets the thread go and ends the child with its last view.
type View struct {
	pool *Pool
	host *Host

	mu     sync.Mutex
	thread string

	closeOnce sync.Once
	closeErr  error
}

var _ Child = (*View)(nil)

func (v *View) PID() int { return v.host.pid }

func (v *View) setThread(id string) {
	v.mu.Lock()
	v.thread = id
	v.mu.Unlock()
}

func (v *View) StartThread(ctx context.Context, opts appserver.ThreadOptions) (string, error) {
	id, err := v.host.child.StartThread(ctx, opts)
	if err == nil {
		v.setThread(id)
	}
	return id, err
}

func (v *View) ResumeThread(ctx context.Context, threadID string, opts appserver.ThreadOptions) error {
	// Set before the call: a resume that timed out may still have loaded the thread.
	v.setThread(threadID)
	return v.host.child.ResumeThread(ctx, threadID, opts)
}

func (v *View) LastTurn(ctx context.Context, threadID string) (appserver.StoredTurn, bool, error) {
	return v.host.child.LastTurn(ctx, threadID)
}

func (v *View) RevertThread(ctx context.Context, threadID, beforeTurnID string) error {
	return v.host.child.RevertThread(ctx, threadID, beforeTurnID)
}

func (v *View) RunTurn(ctx context.Context, threadID string, input []protocol.UserInput, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
	return v.host.child.RunTurn(ctx, threadID, input, opts)
}

func (v *View) SteerTurn(ctx context.Context, threadID, expectedTurnID string, input []protocol.UserInput) error {
	return v.host.child.SteerTurn(ctx, threadID, expectedTurnID, input)
}

func (v *View) Done() <-chan struct{} { return v.host.child.Done() }
func (v *View) Err() error            { return v.host.child.Err() }
func (v *View) LastActivity() time.Time {
	return v.host.child.LastActivity()
}

// CompactThread compacts the view's thread when the host's child can (compacter).
func (v *View) CompactThread(ctx context.Context, threadID string) (*appserver.TurnResult, error) {
	c, ok := v.host.child.(compacter)
	if !ok {
		return nil, fmt.Errorf("codex pid %d cannot compact threads", v.host.pid)
	}
	return c.CompactThread(ctx, threadID)
}

// WarmUp, SetThreadName and DeleteThread make a spare's thread ready (warmer).
func (v *View) WarmUp(ctx context.Context, threadID, name string, opts appserver.ThreadOptions) error {
	w, ok := v.host.child.(warmer)
	if !ok {
		return appserver.ErrNoWarmUp
	}
	return w.WarmUp(ctx, threadID, name, opts)
}

func (v *View) SetThreadName(ctx context.Context, threadID, name string) error {
	w, ok := v.host.child.(warmer)
	if !ok {
		return fmt.Errorf("codex pid %d cannot name threads", v.host.pid)
	}
	return w.SetThreadName(ctx, threadID, name)
}

func (v *View) DeleteThread(ctx context.Context, threadID string) error {
	w, ok := v.host.child.(warmer)
	if !ok {
		return fmt.Errorf("codex pid %d cannot delete threads", v.host.pid)
	}
	return w.DeleteThread(ctx, threadID)
}

// ArchiveThread and UnarchiveThread serve a returning chat's archived thread (retention.Codex).
func (v *View) ArchiveThread(ctx context.Context, threadID string) error {
	a, ok := v.host.child.(interface {
		ArchiveThread(context.Context, string) error
	})
	if !ok {
		return fmt.Errorf("codex pid %d cannot archive threads", v.host.pid)
	}
	return a.ArchiveThread(ctx, threadID)
}

func (v *View) UnarchiveThread(ctx context.Context, threadID string) error {
	a, ok := v.host.child.(interface {
		UnarchiveThread(context.Context, string) error
	})
	if !ok {
		return fmt.Errorf("codex pid %d cannot unarchive threads", v.host.pid)
	}
	return a.UnarchiveThread(ctx, threadID)
}

// ResumeTurn goes on with the view's thread's turn handed over with the host's child.
func (v *View) ResumeTurn(ctx context.Context, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
	r, ok := v.host.child.(interface {
		ResumeThreadTurn(context.Context, string, appserver.TurnOptions) (*appserver.TurnResult, error)
	})
	if !ok {
		return nil, fmt.Errorf("codex pid %d: %w", v.host.pid, appserver.ErrNoHandover)
	}
	v.mu.Lock()
	thread := v.thread
	v.mu.Unlock()
	return r.ResumeThreadTurn(ctx, thread, opts)
}

// unloader is a host child that can let one of its threads go (*appserver.Client).
type unloader interface {
	UnloadThread(ctx context.Context, threadID string) error
	WedgedThread(threadID string) bool
}

var _ unloader = (*appserver.Client)(nil)

// errCannotLetGo is why a host is drained when one of its threads cannot leave it.
var errCannotLetGo = errors.New("a thread could not leave the shared child")

// Close lets the view's thread go and, when it was the host's last, closes the host's child.
// It returns once the thread is free for another child: unloaded, or its child reaped. A
// thread that cannot be unloaded (its turn ignored turn/interrupt, or codex does not let go in
// time) holds the whole child: the host drains, and its child is closed once the others left
// or the drain bound passed.
func (v *View) Close() error {
	v.closeOnce.Do(func() { v.closeErr = v.close() })
	return v.closeErr
}

func (v *View) close() error {
	h, p := v.host, v.pool
	v.mu.Lock()
	thread := v.thread
	v.mu.Unlock()
	if h.child.Err() == nil && thread != "" {
		if err := v.unload(thread); err != nil {
			p.cfg.Log.Warn("thread cannot leave the shared codex child; the child drains and ends",
				zap.Int("pid", h.pid), zap.String("thread_id", thread), zap.Error(err))
			if p.Drain(h, ReasonWedged) && p.cfg.OnDrain != nil {
				p.cfg.OnDrain(h)
			}
			p.awaitAlone(h)
			err := h.child.Close()
			p.leave(h)
			return err
		}
	}
	if p.leave(h) > 0 {
		return nil
	}
	return h.child.Close()
}

func (v *View) unload(thread string) error {
	u, ok := v.host.child.(unloader)
	if !ok {
		return nil // a test's child, which holds no writer
	}
	if u.WedgedThread(thread) {
		// codex still runs the thread's turn that ignored its interrupt: it never unloads it.
		return fmt.Errorf("codex pid %d: %w: its turn ignored turn/interrupt", v.host.pid, errCannotLetGo)
	}
	ctx, cancel := context.WithTimeout(context.Background(), v.pool.cfg.UnloadTimeout)
	defer cancel()
	if err := u.UnloadThread(ctx, thread); err != nil {
		return fmt.Errorf("codex pid %d: %w: %w", v.host.pid, errCannotLetGo, err)
	}
	return nil
}

// ReasonWedged: a shared child drains because one of its threads cannot leave it (its turn
// ignored turn/interrupt, or codex did not unload it).
const ReasonWedged = "host_wedged"

// compacter and warmer are what a host's child may do besides Child (*appserver.Client does).
type compacter interface {
	CompactThread(ctx context.Context, threadID string) (*appserver.TurnResult, error)
}

type warmer interface {
	WarmUp(ctx context.Context, threadID, name string, opts appserver.ThreadOptions) error
	SetThreadName(ctx context.Context, threadID, name string) error
	DeleteThread(ctx context.Context, threadID string) error
}

// Child is h's codex child (nil until it started).
func (h *Host) Child() Child { return h.child }

// PID is h's child's pid.
func (h *Host) PID() int { return h.pid }

// Started is when h's child started.
func (h *Host) Started() time.Time { return h.started }

// AddTurn counts a turn one of h's threads ran; Turns is how many ran (ChildMaxTurns).
func (h *Host) AddTurn()     { h.turns.Add(1) }
func (h *Host) Turns() int64 { return h.turns.Load() }

// Host is the host v's thread lives in.
func (v *View) Host() *Host { return v.host }
