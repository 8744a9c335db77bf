package appserver_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TestRealSteerJoinsRunningTurn: turn/steer with the running turn's id adds the text to that
// turn (params threadId, input, expectedTurnId as the real codex takes them): the model's next
// request carries both user texts, and the one turn's reply answers them. A steer naming
// another turn, or a turn that already ended, is refused as ErrNotSteerable.
func TestRealSteerJoinsRunningTurn(t *testing.T) {
	noLeaks(t)
	release := make(chan struct{})
	e := newRealEnv(t, mockmodel.Config{Script: func(req mockmodel.Request) mockmodel.Reply {
		r := mockmodel.Reply{Text: "saw: " + strings.Join(req.UserTexts, " | ")}
		if slices.Equal(req.UserTexts, []string{"first"}) {
			r.Hold = release // the turn runs until the test has steered it
		}
		return r
	}})
	c := e.start(t, nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	thread, err := c.StartThread(ctx, e.threadOpts("never"))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	type outcome struct {
		res *appserver.TurnResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.RunTurn(ctx, thread, text("first"), appserver.TurnOptions{OnStarted: func(id string) { started <- id }})
		done <- outcome{res, err}
	}()
	turnID := <-started
	if err := e.mock.WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.SteerTurn(ctx, thread, "not-"+turnID, text("wrong")); !errors.Is(err, appserver.ErrNotSteerable) {
		t.Fatalf("steer naming another turn: %v, want ErrNotSteerable", err)
	}
	if err := c.SteerTurn(ctx, thread, turnID, text("second")); err != nil {
		t.Fatalf("steer: %v (stderr: %s)", err, c.StderrTail())
	}
	close(release)
	o := <-done
	if o.err != nil {
		t.Fatalf("turn: %v (stderr: %s)", o.err, c.StderrTail())
	}
	if o.res.TurnID != turnID || o.res.Status != protocol.TurnCompleted {
		t.Errorf("turn %s status %q, want %s completed", o.res.TurnID, o.res.Status, turnID)
	}
	if got := replyOf(o.res); got != "saw: first | second" {
		t.Errorf("reply %q, want the one reply to both texts", got)
	}
	reqs := e.mock.Requests()
	if last := reqs[len(reqs)-1]; !slices.Equal(last.UserTexts, []string{"first", "second"}) {
		t.Errorf("last model request carried %q, want both texts", last.UserTexts)
	}
	if err := c.SteerTurn(ctx, thread, turnID, text("late")); !errors.Is(err, appserver.ErrNotSteerable) {
		t.Errorf("steer after the turn ended: %v, want ErrNotSteerable", err)
	}
}
