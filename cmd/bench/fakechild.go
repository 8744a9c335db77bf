package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/internal/protocol"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// fakeChild is an in-memory supervisor.Child whose turns complete at once. With it the scale run
// measures the supervisor alone: no process, no pipe, no JSON-RPC.
type fakeChild struct {
	thread    string
	done      chan struct{}
	closeOnce sync.Once
	turns     atomic.Int64
	last      atomic.Int64 // unix nanoseconds of the last turn
}

// fakeSpawner hands out fake children with distinct thread ids.
type fakeSpawner struct {
	seq atomic.Int64
}

// spawn is a supervisor.SpawnFunc.
func (f *fakeSpawner) spawn(ctx context.Context, chatKey string) (supervisor.Child, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &fakeChild{thread: "fake-thread-" + strconv.FormatInt(f.seq.Add(1), 10), done: make(chan struct{})}
	c.last.Store(time.Now().UnixNano())
	return c, nil
}

// PID is 0: the supervisor treats pids ≤ 0 as "no process" and never reads /proc for or signals
// them.
func (c *fakeChild) PID() int { return 0 }

func (c *fakeChild) StartThread(context.Context, appserver.ThreadOptions) (string, error) {
	return c.thread, nil
}

func (c *fakeChild) ResumeThread(context.Context, string, appserver.ThreadOptions) error {
	return nil
}

// LastTurn reports no history: the fake keeps none.
func (c *fakeChild) LastTurn(context.Context, string) (appserver.StoredTurn, bool, error) {
	return appserver.StoredTurn{}, false, nil
}

func (c *fakeChild) RevertThread(context.Context, string, string) error { return nil }

// RunTurn completes immediately; Duration is its own (tiny) time, which the scale run subtracts
// from Submit's latency to get the supervisor's overhead.
func (c *fakeChild) RunTurn(ctx context.Context, threadID string, input []protocol.UserInput, _ appserver.TurnOptions) (*appserver.TurnResult, error) {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := c.turns.Add(1)
	text := ""
	if len(input) > 0 {
		text = input[0].Text
	}
	turnID := "fake-turn-" + strconv.FormatInt(n, 10)
	res := &appserver.TurnResult{
		ThreadID:      threadID,
		TurnID:        turnID,
		Status:        protocol.TurnCompleted,
		Notifications: appservertest.TurnNotifications(threadID, turnID, protocol.TurnCompleted, "echo: "+text),
	}
	c.last.Store(time.Now().UnixNano())
	res.Duration = time.Since(start)
	return res, nil
}

// SteerTurn refuses, as codex does for a turn that already ended: the fake's turns end at once.
func (c *fakeChild) SteerTurn(_ context.Context, threadID, expectedTurnID string, _ []protocol.UserInput) error {
	return fmt.Errorf("steer turn %s on thread %s: %w", expectedTurnID, threadID, appserver.ErrNotSteerable)
}

func (c *fakeChild) Done() <-chan struct{} { return c.done }

func (c *fakeChild) Err() error {
	select {
	case <-c.done:
		return appserver.ErrClosed
	default:
		return nil
	}
}

func (c *fakeChild) LastActivity() time.Time { return time.Unix(0, c.last.Load()) }

func (c *fakeChild) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return nil
}
