package approvals

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
)

// An answer takes the approval off the board at once, so a second answer cannot decide it; with
// several waiting, an answer that names none is refused rather than landing on one; the numbers
// a previous image gave are kept.
func TestBoardTakesEachApprovalOnce(t *testing.T) {
	b := New()
	b.Keep("a", map[string]uint64{"r7": 41})
	p1 := b.Publish("a", "a", appserver.ApprovalRequest{RequestID: "r7"}, time.Minute)
	p2 := b.Publish("a", "a", appserver.ApprovalRequest{RequestID: "r8"}, time.Minute)
	if p1.Seq != 41 || p2.Seq != 42 {
		t.Fatalf("numbers %d, %d; want the kept 41, then 42", p1.Seq, p2.Seq)
	}
	if _, err := b.Take("a", 0); !errors.Is(err, ErrWhich) {
		t.Fatalf("an unnamed answer with two waiting: %v, want ErrWhich", err)
	}
	got, err := b.Take("a", 41)
	if err != nil || got != p1 {
		t.Fatalf("take 41: %v, %v", got, err)
	}
	got.Answer("accept")
	if d := <-p1.Answered(); d != "accept" {
		t.Fatalf("decision %q", d)
	}
	if _, err := b.Take("a", 41); !errors.Is(err, ErrNone) {
		t.Fatalf("a second answer to 41: %v, want ErrNone", err)
	}
	if _, err := b.Take("b", 0); !errors.Is(err, ErrNone) {
		t.Fatalf("another chat's answer: %v, want ErrNone", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if a, err := b.Wait(ctx, "a", 41); err != nil || a.Seq != 42 {
		t.Fatalf("wait after 41: %+v, %v; want 42 at once", a, err)
	}
}
