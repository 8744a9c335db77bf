package main

import (
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// modelFaults is the mock model's script: while armed, it makes a fraction of turns hang (the
// daemon's turn watchdog must interrupt them) or fail with HTTP 500 (codex reports a failed turn).
// The draw for a message depends only on the seed, the message's token and how many requests
// that message made before, so it does not depend on the order concurrent turns reach the mock.
type modelFaults struct {
	seed               uint64
	hangRate, failRate float64
	armed              atomic.Bool

	mu       sync.Mutex
	attempts map[string]int // token → model requests seen
	hangs    int
	fails    int
}

func newModelFaults(seed uint64, hangRate, failRate float64) *modelFaults {
	return &modelFaults{seed: seed, hangRate: hangRate, failRate: failRate, attempts: make(map[string]int)}
}

// Script is the mockmodel.Config.Script. Without a fault it gives the default
// reply, "reply #<n>: <message text>", which carries the message's token and its chat's history
// length.
func (f *modelFaults) Script(req mockmodel.Request) mockmodel.Reply {
	ok := mockmodel.Reply{Text: mockmodel.DefaultText(req)}
	label, idx, found := parseToken(req.LastUserText)
	if !found || req.HasToolOutput {
		return ok
	}
	token := messageText(label, idx)
	f.mu.Lock()
	defer f.mu.Unlock()
	attempt := f.attempts[token]
	f.attempts[token]++
	if !f.armed.Load() {
		return ok
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(token))
	x := rand.New(rand.NewPCG(f.seed, h.Sum64()+uint64(attempt))).Float64()
	switch {
	case x < f.hangRate:
		f.hangs++
		return mockmodel.Reply{Hang: true}
	case x < f.hangRate+f.failRate:
		f.fails++
		return mockmodel.Reply{Status: http.StatusInternalServerError}
	}
	return ok
}

// counts returns the faults injected so far.
func (f *modelFaults) counts() (hangs, fails int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hangs, f.fails
}
