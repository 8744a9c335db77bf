// Package parts is fieldowner's test case: a composite that reaches into one of its parts.
package parts

import "sync"

type pool struct {
	mu    sync.Mutex
	slots int
}

func (p *pool) take() {
	p.mu.Lock()
	p.slots--
	p.mu.Unlock()
}
