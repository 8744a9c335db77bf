package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/protocol"
)

// Shared children (Config.ThreadsPerChild > 1). The pool still thinks in sessions: a session is
// one chat's thread in a child, and its Child is a threadView, the chat's share of a host, the
// codex child several chats' threads live in. Closing a view lets its thread go (unsubscribe,
// then wait for codex to unload it: the thread has one writer, and the chat's next child may
// resume it only once this one let go); the host's child ends with its last view.
//
// A host takes threads while it is placing. It stops for good when it drains: recycling (its
// memory, age or turns), a thread wedged in it, a thread it could not let go. Its views are
// then retired as they go idle, and those still busy past the drain bound are interrupted; the
// chats' threads are resumed in other children by their next messages.

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

// host is one shared codex child.
type host struct {
	id    uint64
	ready chan struct{} // closed once the child started (child set) or failed (err set)
	child Child
	err   error
	pid   int
	// own marks a child of one chat: one whose turns killed children before gets no
	// neighbours to take down with it (hostPool.place).
	own bool

	// Guarded by hostPool.mu.
	turns atomic.Int64 // turns its threads ran (ChildMaxTurns)

	state   hostState
	reason  string // why it drains
	views   int    // threads placed in it and not let go yet
	started time.Time
	left    chan struct{} // closed and replaced whenever a view leaves
}

// hostPoolConfig configures a hostPool.
type hostPoolConfig struct {
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
	OnDrain func(h *host)
}

// hostPool places chats' threads in shared children. It has a lock of its own and never calls
// the supervisor while holding it; the supervisor calls it with or without Supervisor.mu.
type hostPool struct {
	cfg hostPoolConfig

	mu     sync.Mutex
	hosts  map[*host]struct{}
	last   map[string]*host // the host each chat key's thread was last placed in
	nextID uint64
}

func newHostPool(cfg hostPoolConfig) *hostPool {
	return &hostPool{cfg: cfg, hosts: make(map[*host]struct{}), last: make(map[string]*host)}
}

func (p *hostPool) setStateLocked(h *host, to hostState) {
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
func (p *hostPool) roomLocked(h *host) bool {
	return (h.state == hostPlacing || h.state == hostStarting) && !h.own && h.views < p.cfg.PerChild
}

// place gives chatKey's thread a place: a view on the host its thread was last in when that
// has room, else on the fullest host with room (fewer children, and emptier ones end sooner),
// else on a new child. own asks for a child of the chat's own. A spare (chatKey "") is a
// thread opened ahead in a child with room.
func (p *hostPool) place(ctx context.Context, chatKey string, own bool) (*threadView, error) {
	p.mu.Lock()
	var h *host
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
		h = &host{id: p.nextID, ready: make(chan struct{}), own: own, state: hostStarting, left: make(chan struct{})}
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
	return &threadView{pool: p, host: h}, nil
}

// giveUp takes back a placement that is not used, closing the host's child when it was the
// last placement in it (a host still starting is left to its spawner, which holds one).
func (p *hostPool) giveUp(h *host) {
	if p.leave(h) == 0 && h.child != nil {
		_ = h.child.Close()
	}
}

// adopt registers a child the previous image handed over with n threads in it, placing, and
// returns a view for each.
func (p *hostPool) adopt(child Child, n int) []*threadView {
	p.mu.Lock()
	p.nextID++
	h := &host{id: p.nextID, ready: make(chan struct{}), child: child, pid: child.PID(), state: hostPlacing,
		views: n, started: time.Now(), left: make(chan struct{})}
	close(h.ready)
	p.hosts[h] = struct{}{}
	p.mu.Unlock()
	views := make([]*threadView, n)
	for i := range views {
		views[i] = &threadView{pool: p, host: h}
	}
	return views
}

// leave takes a view off h; the last view of a host that failed to start, or of an ended one,
// has nothing more to do. It reports how many views are left.
func (p *hostPool) leave(h *host) int {
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

// drain makes h stop taking threads, for reason; the first reason wins. It reports whether
// this call began the drain: the caller then moves the host's threads out.
func (p *hostPool) drain(h *host, reason string) bool {
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

// draining reports whether h takes no more threads.
func (p *hostPool) draining(h *host) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return h.state != hostPlacing && h.state != hostStarting
}

// awaitAlone waits until v is the only view left on its host, or the drain bound passed.
func (p *hostPool) awaitAlone(h *host) {
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

// threads is the number of views on h.
func (p *hostPool) threads(h *host) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return h.views
}

// threadView is one chat's thread in a host: the Child of its session. Every call goes to the
// host's child; Close lets the thread go and ends the child with its last view.
type threadView struct {
	pool *hostPool
	host *host

	mu     sync.Mutex
	thread string

	closeOnce sync.Once
	closeErr  error
}

var _ Child = (*threadView)(nil)

func (v *threadView) PID() int { return v.host.pid }

func (v *threadView) setThread(id string) {
	v.mu.Lock()
	v.thread = id
	v.mu.Unlock()
}

func (v *threadView) StartThread(ctx context.Context, opts appserver.ThreadOptions) (string, error) {
	id, err := v.host.child.StartThread(ctx, opts)
	if err == nil {
		v.setThread(id)
	}
	return id, err
}

func (v *threadView) ResumeThread(ctx context.Context, threadID string, opts appserver.ThreadOptions) error {
	// Set before the call: a resume that timed out may still have loaded the thread.
	v.setThread(threadID)
	return v.host.child.ResumeThread(ctx, threadID, opts)
}

func (v *threadView) LastTurn(ctx context.Context, threadID string) (appserver.StoredTurn, bool, error) {
	return v.host.child.LastTurn(ctx, threadID)
}

func (v *threadView) RevertThread(ctx context.Context, threadID, beforeTurnID string) error {
	return v.host.child.RevertThread(ctx, threadID, beforeTurnID)
}

func (v *threadView) RunTurn(ctx context.Context, threadID string, input []protocol.UserInput, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
	return v.host.child.RunTurn(ctx, threadID, input, opts)
}

func (v *threadView) SteerTurn(ctx context.Context, threadID, expectedTurnID string, input []protocol.UserInput) error {
	return v.host.child.SteerTurn(ctx, threadID, expectedTurnID, input)
}

func (v *threadView) Done() <-chan struct{} { return v.host.child.Done() }
func (v *threadView) Err() error            { return v.host.child.Err() }
func (v *threadView) LastActivity() time.Time {
	return v.host.child.LastActivity()
}

// CompactThread compacts the view's thread when the host's child can (compacter).
func (v *threadView) CompactThread(ctx context.Context, threadID string) (*appserver.TurnResult, error) {
	c, ok := v.host.child.(compacter)
	if !ok {
		return nil, fmt.Errorf("codex pid %d cannot compact threads", v.host.pid)
	}
	return c.CompactThread(ctx, threadID)
}

// WarmUp, SetThreadName and DeleteThread make a spare's thread ready (warmer).
func (v *threadView) WarmUp(ctx context.Context, threadID, name string, opts appserver.ThreadOptions) error {
	w, ok := v.host.child.(warmer)
	if !ok {
		return appserver.ErrNoWarmUp
	}
	return w.WarmUp(ctx, threadID, name, opts)
}

func (v *threadView) SetThreadName(ctx context.Context, threadID, name string) error {
	w, ok := v.host.child.(warmer)
	if !ok {
		return fmt.Errorf("codex pid %d cannot name threads", v.host.pid)
	}
	return w.SetThreadName(ctx, threadID, name)
}

func (v *threadView) DeleteThread(ctx context.Context, threadID string) error {
	w, ok := v.host.child.(warmer)
	if !ok {
		return fmt.Errorf("codex pid %d cannot delete threads", v.host.pid)
	}
	return w.DeleteThread(ctx, threadID)
}

// ArchiveThread and UnarchiveThread serve a returning chat's archived thread (retention.Codex).
func (v *threadView) ArchiveThread(ctx context.Context, threadID string) error {
	a, ok := v.host.child.(interface {
		ArchiveThread(context.Context, string) error
	})
	if !ok {
		return fmt.Errorf("codex pid %d cannot archive threads", v.host.pid)
	}
	return a.ArchiveThread(ctx, threadID)
}

func (v *threadView) UnarchiveThread(ctx context.Context, threadID string) error {
	a, ok := v.host.child.(interface {
		UnarchiveThread(context.Context, string) error
	})
	if !ok {
		return fmt.Errorf("codex pid %d cannot unarchive threads", v.host.pid)
	}
	return a.UnarchiveThread(ctx, threadID)
}

// ResumeTurn goes on with the view's thread's turn handed over with the host's child.
func (v *threadView) ResumeTurn(ctx context.Context, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
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
func (v *threadView) Close() error {
	v.closeOnce.Do(func() { v.closeErr = v.close() })
	return v.closeErr
}

func (v *threadView) close() error {
	h, p := v.host, v.pool
	v.mu.Lock()
	thread := v.thread
	v.mu.Unlock()
	if h.child.Err() == nil && thread != "" {
		if err := v.unload(thread); err != nil {
			p.cfg.Log.Warn("thread cannot leave the shared codex child; the child drains and ends",
				zap.Int("pid", h.pid), zap.String("thread_id", thread), zap.Error(err))
			if p.drain(h, ReasonHostWedged) && p.cfg.OnDrain != nil {
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

func (v *threadView) unload(thread string) error {
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
