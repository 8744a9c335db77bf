package parts

type embedsPool struct{ pool }

// Top composes the pool.
type Top struct {
	pool  *pool
	count int
}

// Run takes a slot the right way and then reaches into the pool's state.
func (t *Top) Run() {
	t.pool.take()
	t.pool.slots++ // the stray
	t.count++
}

func reset(t *Top) { t.count = 0 }

func helper(n int) int { return n }

var _ = embedsPool{}
