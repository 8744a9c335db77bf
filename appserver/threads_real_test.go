package appserver_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// unloadAtOnce is the pool's setting for children that host several chats' threads.
func unloadAtOnce(cfg *appserver.Config) {
	cfg.ConfigOverrides = append(cfg.ConfigOverrides, "thread_unload_delay_secs=0")
}

// TestRealThreadsShareAChild: one real codex child runs two threads' turns side by side; a turn
// the model never answers holds neither the other thread nor its later turns, /stop's interrupt
// ends it, and an unloaded thread is resumed with its history by another child at once (the
// one-writer rule lets go with thread/closed).
func TestRealThreadsShareAChild(t *testing.T) {
	noLeaks(t)
	e := newRealEnv(t, mockmodel.Config{Script: func(r mockmodel.Request) mockmodel.Reply {
		if strings.HasPrefix(r.LastUserText, "hang") && !r.HasToolOutput {
			return mockmodel.Reply{Hang: true}
		}
		return mockmodel.DefaultScript(r)
	}})
	c := e.start(t, unloadAtOnce)
	ctx := ctxTimeout(t, 3*time.Minute)
	a, err := c.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	mustComplete(t, c, ctx, a, "first of a")
	stop, hung := startHanging(t, c, ctx, a, 20*time.Second)
	if err := e.mock.WaitHung(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i, msg := range []string{"one", "two"} {
		r := mustComplete(t, c, ctx, b, msg)
		if want := "reply #" + string(rune('1'+i)) + ": " + msg; replyOf(r) != want {
			t.Errorf("thread b beside the hung turn: reply %q, want %q", replyOf(r), want)
		}
	}
	stop(errStopAsked)
	o := <-hung
	if errors.Is(o.err, appserver.ErrWedged) || o.res == nil || o.res.Status != protocol.TurnInterrupted {
		t.Fatalf("the hung turn after /stop's interrupt: %s %v, want interrupted", statusOf(o.res), o.err)
	}
	if c.Wedged() || c.Running() {
		t.Errorf("wedged %v running %v after the interrupt", c.Wedged(), c.Running())
	}

	// Thread b leaves the child and is resumed elsewhere at once, history and all.
	if err := c.UnloadThread(ctx, b); err != nil {
		t.Fatalf("unload thread b: %v", err)
	}
	other := e.start(t, unloadAtOnce)
	if err := other.ResumeThread(ctx, b, e.threadOpts("never")); err != nil {
		t.Fatalf("resume the unloaded thread in another child: %v", err)
	}
	if r := mustComplete(t, other, ctx, b, "three"); replyOf(r) != "reply #3: three" {
		t.Errorf("thread b in the other child: reply %q, want its history kept", replyOf(r))
	}
	// Thread a goes on in the first child.
	if r := mustComplete(t, c, ctx, a, "again"); !strings.HasSuffix(replyOf(r), ": again") {
		t.Errorf("thread a after the interrupt: reply %q", replyOf(r))
	}
}
