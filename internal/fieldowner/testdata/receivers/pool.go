// Package receivers is fieldowner's test case for the receiver rules: parts whose fields
// functions of other types write, and …Locked methods called across types. Every offence is
// planted in the part's own file, where a check by files would pass it.
package receivers

import "sync"

// pool is a part: only its methods and its constructor write its fields.
type pool struct {
	mu      sync.Mutex
	slots   int
	waiters []int
	inner   counter
}

// counter is a part too, a struct value inside pool.
type counter struct{ n int }

func (c *counter) add() { c.n++ }

func newPool() *pool { return &pool{slots: 1, waiters: []int{}} }

func (p *pool) takeLocked() { p.slots-- }

func (p *pool) take() {
	p.mu.Lock()
	p.takeLocked()
	p.inner.add()
	p.mu.Unlock()
}

// guard is a part whose fields no one else may even read: its state is reached through do.
type guard struct {
	mu sync.Mutex
	p  pool
}

func (g *guard) do(fn func(p *pool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn(&g.p)
}

// Top composes the parts.
type Top struct {
	pool *pool
	g    *guard
}

func (t *Top) steal() { t.pool.slots++ } // offence: Top writes pool.slots

func (t *Top) drain() {
	t.pool.mu.Lock()
	t.pool.takeLocked() // offence: Top calls pool's …Locked method
	t.pool.mu.Unlock()
}

func (t *Top) count() { t.pool.inner.add() } // offence: a pointer method writes pool.inner

func (t *Top) read() int { return t.pool.slots } // a read: allowed

func (t *Top) later() func() {
	return func() { t.pool.waiters = nil } // offence: a literal in Top's method writes pool.waiters
}

func (t *Top) peek() int { return t.g.p.slots } // offence: Top touches guard.p

func (t *Top) viaGuard() { t.g.do(func(p *pool) { p.take() }) } // through the part's method: allowed

func (t *Top) fresh() pool { return pool{slots: 2} } // offence: a keyed literal sets pool.slots

func clearWaiters(p *pool) { clear(p.waiters) } // offence: a plain function, not a constructor

var _ = newPool

// newEmptyPool is a constructor: it may call the pool's …Locked methods, as its methods may.
func newEmptyPool() *pool {
	p := &pool{slots: 1}
	p.takeLocked()
	return p
}

var _ = newEmptyPool
