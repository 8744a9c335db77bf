package appserver

import (
	"context"
	"errors"
	"testing"
	"time"
)

// codex loads its configuration for thread/start (and opens the thread's model connection), and
// a ChatGPT token swapped meanwhile makes it refuse the thread/start ("failed to load
// configuration: application network permission was revoked", seen on 0.171 in the shared-child
// suite when a chat's thread started as its child's token was pushed). So a thread/start holds
// the turn gate like a turn: a push waits for it, and takes the gate once it is answered.
func TestThreadStartHoldsTheGateAgainstAPush(t *testing.T) {
	p, err := NewPipeChild(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Exit()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	errc := make(chan error, 1)
	go func() {
		_, err := p.C.StartThread(ctx, ThreadOptions{})
		errc <- err
	}()
	select {
	case <-p.ThreadStartSent:
	case <-time.After(time.Minute):
		t.Fatal("no thread/start written")
	}
	if p.C.gate.tryPush() {
		p.C.gate.release()
		t.Fatal("a token push took the gate while thread/start was in flight")
	}
	stop := errors.New("test ends the thread/start")
	cancel(stop)
	if err := <-errc; !errors.Is(err, stop) {
		t.Fatalf("StartThread = %v, want the test's cause", err)
	}
	if !p.C.gate.tryPush() {
		t.Fatal("the gate stayed held after thread/start returned")
	}
	p.C.gate.release()
}
