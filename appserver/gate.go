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
type turnGate struct {
	mu        sync.Mutex
	turns     int           // turns holding the gate
	exclusive bool          // a push or a pause holds it
	free      chan struct{} // closed and replaced when exclusive ends
}

// enter holds the gate for a turn, waiting while a push or a pause holds it. It fails only
// when ctx ends first.
func (g *turnGate) enter(ctx context.Context) error {
	for {
		g.mu.Lock()
		if !g.exclusive {
			g.turns++
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

// running is the number of turns holding the gate.
func (g *turnGate) running() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.turns
}

// tryAlone holds the gate alone when no turn and nothing else holds it.
func (g *turnGate) tryAlone() bool {
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
