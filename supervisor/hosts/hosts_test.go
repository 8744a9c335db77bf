package hosts

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// stubChild is a Child whose death the test decides; Place only asks its PID and Err.
type stubChild struct {
	pid  int
	mu   sync.Mutex
	err  error
	done chan struct{}
}

func (c *stubChild) PID() int { return c.pid }
func (c *stubChild) StartThread(context.Context, appserver.ThreadOptions) (string, error) {
	return "", errors.New("not used")
}
func (c *stubChild) ResumeThread(context.Context, string, appserver.ThreadOptions) error { return nil }
func (c *stubChild) LastTurn(context.Context, string) (appserver.StoredTurn, bool, error) {
	return appserver.StoredTurn{}, false, nil
}
func (c *stubChild) RevertThread(context.Context, string, string) error { return nil }
func (c *stubChild) RunTurn(context.Context, string, []protocol.UserInput, appserver.TurnOptions) (*appserver.TurnResult, error) {
	return nil, errors.New("not used")
}
func (c *stubChild) SteerTurn(context.Context, string, string, []protocol.UserInput) error {
	return nil
}
func (c *stubChild) Done() <-chan struct{}   { return c.done }
func (c *stubChild) LastActivity() time.Time { return time.Time{} }
func (c *stubChild) Close() error            { return nil }
func (c *stubChild) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// A shared child that died is not given a new thread while its own threads are still being
// retired: the next chat gets a new child.
func TestPlaceSkipsADeadChild(t *testing.T) {
	var spawned []*stubChild
	p := New(Config{PerChild: 4, Log: zap.NewNop(), Spawn: func(context.Context, string) (Child, error) {
		c := &stubChild{pid: 100 + len(spawned), done: make(chan struct{})}
		spawned = append(spawned, c)
		return c, nil
	}})
	ctx := context.Background()
	a, err := p.Place(ctx, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Place(ctx, "b", false)
	if err != nil {
		t.Fatal(err)
	}
	if a.PID() != b.PID() || len(spawned) != 1 {
		t.Fatalf("two chats in pids %d and %d after %d spawns, want one child with room for both", a.PID(), b.PID(), len(spawned))
	}
	dead := spawned[0]
	dead.mu.Lock()
	dead.err = errors.New("killed")
	dead.mu.Unlock()
	c, err := p.Place(ctx, "c", false)
	if err != nil {
		t.Fatal(err)
	}
	if c.PID() == dead.pid || len(spawned) != 2 {
		t.Fatalf("chat c placed in pid %d (dead %d) after %d spawns, want a new child", c.PID(), dead.pid, len(spawned))
	}
	// Chat a comes back: its last child is dead, so it too goes to the live one.
	a2, err := p.Place(ctx, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	if a2.PID() != c.PID() {
		t.Fatalf("chat a back in pid %d, want the live child %d", a2.PID(), c.PID())
	}
}
