package codexauth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

// Hold waits for the refresh in flight (the endpoint rotated and answers late), refuses when its
// context ends first, and starts no refresh until released: the refresh token is presented once.
func TestHoldWaitsForTheRefreshInFlight(t *testing.T) {
	e := newEnv(t)
	m := e.open(nil)
	stale := m.Login().AccessToken
	e.is.SetFault(codexauthtest.FaultLate)
	done := make(chan error, 1)
	go func() {
		_, err := m.Refresh(ctxT(t), stale)
		done <- err
	}()
	if err := e.is.WaitCalls(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Hold(gone); err == nil {
		t.Fatal("Hold returned while the refresh awaits its answer")
	}
	e.is.Release()
	release, err := m.Hold(ctxT(t))
	if err != nil {
		t.Fatalf("Hold after the answer: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the late refresh: %v", err)
	}
	if !e.is.Accepts(m.Login().AccessToken) {
		t.Fatal("the late answer is not the login")
	}
	e.is.SetFault(codexauthtest.FaultNone)
	if _, err := m.Refresh(ctxT(t), m.Login().AccessToken); !errors.Is(err, codexauth.ErrHeld) {
		t.Fatalf("a refresh while held: %v, want ErrHeld", err)
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Fatalf("%d calls, %d reused; want 1 and 0", calls, reused)
	}
	release()
	if _, err := m.Refresh(ctxT(t), m.Login().AccessToken); err != nil {
		t.Fatalf("a refresh once released: %v", err)
	}
	if e.is.Reused() != 0 {
		t.Fatal("a spent refresh token was presented")
	}
}

// A refresh token in doubt (the answer was lost) stays in doubt in a Manager opened with what
// the previous one carried, though auth.json still holds it: it is never sent again.
func TestCarriedDoubtIsNeverSent(t *testing.T) {
	e := newEnv(t)
	m := e.open(nil)
	stale := m.Login().AccessToken
	e.is.SetFault(codexauthtest.FaultLoseAnswer)
	if _, err := m.Refresh(ctxT(t), stale); !errors.Is(err, codexauth.ErrLoginGone) {
		t.Fatalf("lost answer: %v", err)
	}
	e.is.SetFault(codexauthtest.FaultNone)
	carried := m.Carry()
	m.Close()
	next := e.open(func(c *codexauth.Config) { c.Carried = carried })
	if st := next.Status(); st.State != codexauth.StateUncertain {
		t.Fatalf("the next manager's status %+v, want refresh_uncertain", st)
	}
	if _, err := next.Refresh(ctxT(t), next.Login().AccessToken); !errors.Is(err, codexauth.ErrLoginGone) {
		t.Fatalf("refresh in the next manager: %v, want the login unusable", err)
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Fatalf("%d calls, %d reused; want 1 and 0", calls, reused)
	}
	// A manager opened without it would have sent the token again.
	fresh := e.open(nil)
	if st := fresh.Status(); st.State != codexauth.StateValid {
		t.Fatalf("a manager without the carried state: %+v", st)
	}
}
