package appserver

import (
	"context"
	"sync"
)

// turnGate orders a child's turns against the work that must not overlap them: a token push
// (codex fails a model request in flight when its token is swapped under it) and a pause for a
// reload. Turns of different threads hold the gate side by side; a push or a pause holds it
// alone. A turn that arrives while a push holds it waits for the push (short, bounded by
// tokenPushTimeout), so that it never starts with a token the daemon already replaced.
//
// A push that found turns running may be forced (forcePush): it then holds the gate against
// new turns only, while the running ones go on; see Config.TokenPushWait.
//
// A spare's throwaway warm-up turn holds the gate lightly: a pause waits for it, a push does
// not. It reaches only the daemon's canned responder, and a push it holds back would let a
// chat's turn beside it start on the replaced token; a push that fails it costs the spare its
// warm-up, nothing more.
type turnGate struct {
	mu        sync.Mutex
	turns     int           // turns holding the gate
	light     int           // warm-up turns holding the gate
	exclusive bool          // a push or a pause holds it
	free      chan struct{} // closed and replaced when exclusive ends
}

// enter holds the gate for a turn, waiting while a push or a pause holds it. It fails only
// when ctx ends first.
func (g *turnGate) enter(ctx context.Context) error { return g.enterAs(ctx, &g.turns) }

// enterLight holds the gate for a warm-up turn, waiting like enter.
func (g *turnGate) enterLight(ctx context.Context) error { return g.enterAs(ctx, &g.light) }

// enterAs counts a hold in count (turns or light) once no push or pause holds the gate.
func (g *turnGate) enterAs(ctx context.Context, count *int) error {
	for {
		g.mu.Lock()
		if !g.exclusive {
			*count++
			g.mu.Unlock()
			return nil
		}
		if g.free == nil {
			g.free = make(chan struct{})
		}
		free := g.free
		g.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// enterNow holds the gate for a turn without waiting (a turn handed over by the previous image,
// installed before anything else can hold the gate).
func (g *turnGate) enterNow() {
	g.mu.Lock()
	g.turns++
	g.mu.Unlock()
}

// leave ends a turn's hold; it reports how many turns still hold the gate.
func (g *turnGate) leave() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.turns--
	return g.turns
}

// leaveLight ends a warm-up turn's hold.
func (g *turnGate) leaveLight() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.light--
}

// running is the number of turns holding the gate, warm-up turns aside.
func (g *turnGate) running() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.turns
}

// tryAlone holds the gate alone when no turn, no warm-up and nothing else holds it (a pause).
func (g *turnGate) tryAlone() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exclusive || g.turns > 0 || g.light > 0 {
		return false
	}
	g.exclusive = true
	return true
}

// tryPush holds the gate for a token push when no turn and nothing else holds it; warm-up
// turns may go on beside it.
func (g *turnGate) tryPush() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exclusive || g.turns > 0 {
		return false
	}
	g.exclusive = true
	return true
}

// forcePush holds the gate against new turns while the running ones go on; it reports false
// when something else (a pause, another push) holds it already.
func (g *turnGate) forcePush() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exclusive {
		return false
	}
	g.exclusive = true
	return true
}

// release ends a hold taken by tryAlone or forcePush and wakes the turns waiting for it.
func (g *turnGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.exclusive = false
	if g.free != nil {
		close(g.free)
		g.free = nil
	}
}
