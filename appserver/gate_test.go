package appserver

import (
	"context"
	"testing"
	"testing/synctest"
)

// A spare's warm-up turn holds the gate lightly: a token push goes out beside it (it would
// otherwise let a chat's next turn start on the replaced token), while a pause for a reload
// still waits for it, as for any turn.
func TestGateWarmUpHoldsOffAPauseNotAPush(t *testing.T) {
	var g turnGate
	if err := g.enterLight(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.running() != 0 {
		t.Errorf("running = %d with only a warm-up holding the gate, want 0", g.running())
	}
	if g.tryAlone() {
		t.Fatal("a pause took the gate while a warm-up turn held it")
	}
	if !g.tryPush() {
		t.Fatal("a token push waited for a warm-up turn")
	}
	g.release()
	g.leaveLight()
	if !g.tryAlone() {
		t.Fatal("a pause could not take the gate once the warm-up left")
	}
	g.release()

	if err := g.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.tryPush() || g.tryAlone() {
		t.Fatal("a push or a pause took the gate while a chat's turn held it")
	}
	g.leave()
}

// A warm-up that arrives while a push holds the gate waits for the push, as a turn does.
func TestGateWarmUpWaitsForAPush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g turnGate
		if !g.tryPush() {
			t.Fatal("push on an idle gate refused")
		}
		entered := make(chan error, 1)
		go func() { entered <- g.enterLight(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-entered:
			t.Fatalf("the warm-up entered while a push held the gate (err %v)", err)
		default:
		}
		g.release()
		if err := <-entered; err != nil {
			t.Fatal(err)
		}
		g.leaveLight()
	})
}
