package supervisor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TestApprovalAnsweredOnlyByTheChatAsked: a turn of chat "peer:x" whose prompts go to "canvas"
// (Input.AskApprovalsOf) is answered by the canvas only; the turn's own chat finds nothing to
// answer, and neither sees the other's approvals in PendingApproval.
func TestApprovalAnsweredOnlyByTheChatAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSup(t, newFakeWorld(), nil)
		defer shutdown(t, s)
		done := make(chan error, 1)
		go func() {
			r, err := s.SubmitInput(context.Background(), "peer:x", Input{Text: "ask", AskApprovalsOf: "canvas"})
			if err == nil && r.Text != "decision: "+protocol.DecisionAccept {
				t.Errorf("reply %+v", r)
			}
			done <- err
		}()
		a, err := s.WaitApproval(context.Background(), "peer:x", 0)
		if err != nil {
			t.Fatal(err)
		}
		if a.ChatKey != "peer:x" || a.AskedOf != "canvas" {
			t.Fatalf("approval %+v, want peer:x's asked of canvas", a)
		}
		if _, ok := s.PendingApproval("peer:x"); ok {
			t.Error("the turn's own chat sees an approval asked of the canvas")
		}
		if got, err := s.Answer("peer:x", 0, protocol.DecisionAccept); err == nil {
			t.Fatalf("peer:x answered an approval asked of the canvas: %+v", got)
		}
		if got, ok := s.PendingApproval("canvas"); !ok || got.Seq != a.Seq {
			t.Fatalf("canvas's PendingApproval = %+v, %v", got, ok)
		}
		if _, err := s.Answer("canvas", 0, protocol.DecisionAccept); err != nil {
			t.Fatal("the canvas could not answer")
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestTwoApprovalsAnsweredByNumber: with two approvals waiting for one chat, a bare answer
// (n 0) decides neither (ErrWhichApproval); each is answered by its number, a number answered
// already finds nothing, and with one left a bare answer decides it.
func TestTwoApprovalsAnsweredByNumber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSup(t, newFakeWorld(), nil)
		defer shutdown(t, s)
		// Two chats' turns asked of one party: the board is the same as for two tool calls of one
		// turn.
		done := make(chan struct{}, 2)
		for _, key := range []string{"x", "y"} {
			go func() {
				if _, err := s.SubmitInput(context.Background(), key, Input{Text: "ask", AskApprovalsOf: "canvas"}); err != nil {
					t.Error(err)
				}
				done <- struct{}{}
			}()
		}
		synctest.Wait()
		list := s.PendingApprovals("canvas")
		if len(list) != 2 {
			t.Fatalf("%d approvals pending, want 2", len(list))
		}
		if _, err := s.Answer("canvas", 0, protocol.DecisionDecline); !errors.Is(err, ErrWhichApproval) {
			t.Fatalf("bare answer with two waiting: %v, want ErrWhichApproval", err)
		}
		second := list[1]
		if a, err := s.Answer("canvas", second.Seq, protocol.DecisionDecline); err != nil || a.Seq != second.Seq || a.ChatKey != second.ChatKey {
			t.Fatalf("answer %d: %+v, %v", second.Seq, a, err)
		}
		if _, err := s.Answer("canvas", second.Seq, protocol.DecisionAccept); !errors.Is(err, ErrNoApproval) {
			t.Fatalf("second answer to %d: %v, want ErrNoApproval", second.Seq, err)
		}
		if a, err := s.Answer("canvas", 0, protocol.DecisionAccept); err != nil || a.Seq != list[0].Seq {
			t.Fatalf("bare answer with one left: %+v, %v", a, err)
		}
		<-done
		<-done
	})
}
