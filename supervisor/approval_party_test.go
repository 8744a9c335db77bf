package supervisor

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/molecule-ai/codex-warm/protocol"
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
		if got, ok := s.Answer("peer:x", protocol.DecisionAccept); ok {
			t.Fatalf("peer:x answered an approval asked of the canvas: %+v", got)
		}
		if got, ok := s.PendingApproval("canvas"); !ok || got.Seq != a.Seq {
			t.Fatalf("canvas's PendingApproval = %+v, %v", got, ok)
		}
		if _, ok := s.Answer("canvas", protocol.DecisionAccept); !ok {
			t.Fatal("the canvas could not answer")
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
