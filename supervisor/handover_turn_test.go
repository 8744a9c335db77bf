package supervisor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
)

// runningPausableChild is a fake child whose running turn a reload can pause, as the appserver
// client's can.
type runningPausableChild struct {
	*pausableChild
}

func (c *runningPausableChild) PauseRunning(ctx context.Context) (appserver.Handover, error) {
	h, err := c.Pause(ctx)
	c.mu.Lock()
	ft := c.active
	c.mu.Unlock()
	if ft != nil {
		h.Turn = &appserver.TurnHandover{ThreadID: ft.threadID, TurnID: ft.id}
	}
	return h, err
}

// submitInputAsync is submitAsync for a message with an id.
func submitInputAsync(s *Supervisor, key string, in Input) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.reply, p.err = s.SubmitInput(context.Background(), key, in)
	}()
	return p
}

// A freeze hands a running turn over without waiting for it: the turn's caller and the caller
// of the message queued behind it are told ErrHandedOver, and the handed child carries the
// turn and its message's id. When the reload is called off (Thaw), the turn goes on; the
// message given again attaches to it (no second turn), and the queued one runs after it.
func TestFreezeHandsRunningTurnOverAndThawReattaches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		s := newSup(t, w, func(c *Config) {
			c.Spawn = func(ctx context.Context, key string) (Child, error) {
				ch, err := w.spawn(ctx, key)
				if err != nil {
					return nil, err
				}
				return &runningPausableChild{&pausableChild{fakeChild: ch.(*fakeChild)}}, nil
			}
		})
		running := submitInputAsync(s, "a", Input{Text: "block:g", MessageID: "m1"})
		synctest.Wait()
		queued := submitInputAsync(s, "a", Input{Text: "after", MessageID: "m2"})
		synctest.Wait()
		handed, err := s.Freeze(context.Background())
		if err != nil || len(handed) != 1 {
			t.Fatalf("Freeze during a turn: %d children, %v", len(handed), err)
		}
		h := handed[0]
		if h.Turn == nil || h.Turn.MessageID != "m1" || h.Handover.Turn == nil || h.Handover.Turn.TurnID == "" {
			t.Fatalf("handed over %+v (turn %+v)", h, h.Turn)
		}
		for _, p := range []*pending{running, queued} {
			if _, err := p.wait(); !errors.Is(err, ErrHandedOver) {
				t.Fatalf("a caller of a handed-over chat: %v, want ErrHandedOver", err)
			}
		}
		s.Thaw()
		again := submitInputAsync(s, "a", Input{Text: "block:g", MessageID: "m1"})
		second := submitInputAsync(s, "a", Input{Text: "after", MessageID: "m2"})
		synctest.Wait()
		if again.finished() {
			t.Fatal("the message given again was answered before its turn ended")
		}
		w.open("g")
		if r, err := again.wait(); err != nil || r.Text == "" {
			t.Fatalf("the message given again: %+v %v", r, err)
		}
		if _, err := second.wait(); err != nil {
			t.Fatalf("the queued message given again: %v", err)
		}
		if got := w.turns(); len(got) != 2 || got[0] != "a:block:g" || got[1] != "a:after" {
			t.Fatalf("turns %v, want the held one once, then the queued one", got)
		}
		shutdown(t, s)
	})
}

// resumingChild is a fake child adopted in the middle of a turn: ResumeTurn goes on with the
// turn as RunTurn would (a "block:<gate>" text).
type resumingChild struct {
	*fakeChild
	text    string
	resumed int
}

func (c *resumingChild) ResumeTurn(ctx context.Context, opts appserver.TurnOptions) (*appserver.TurnResult, error) {
	c.resumed++
	return c.RunTurn(ctx, "", userInput(c.text, nil), opts)
}

// A child handed over in the middle of a turn: the new image's supervisor goes on with the turn
// (no spawn, no new turn/start), the message given again attaches to it by its id and gets its
// reply, a message queued behind it runs after it, and the approval it had pending keeps its
// number.
func TestAdoptedRunningTurnAnswersItsMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		old := newSup(t, w, nil)
		first, err := old.Submit(context.Background(), "a", "hello")
		if err != nil {
			t.Fatal(err)
		}
		child := &resumingChild{fakeChild: w.child(0), text: "block:g"}
		s := newSup(t, w, func(c *Config) {
			c.Adopted = []AdoptedChild{{ChatKey: "a", ThreadID: first.ThreadID, Turns: 1, Child: child,
				Turn: &HandedTurn{MessageID: "m1", Approvals: map[string]uint64{"7": 41}, Started: time.Now().Add(-3 * time.Minute)}}}
		})
		attached := submitInputAsync(s, "a", Input{Text: "block:g", MessageID: "m1"})
		queued := submitInputAsync(s, "a", Input{Text: "next", MessageID: "m2"})
		synctest.Wait()
		if attached.finished() || queued.finished() {
			t.Fatal("answered before the handed-over turn ended")
		}
		for _, c := range s.Status().Children {
			if c.ChatKey == "a" && c.TurnAge != 3*time.Minute {
				t.Fatalf("turn age %s after the reload, want the 3m the turn has run", c.TurnAge)
			}
		}
		if p := s.approvals.Publish("a", "a", appserver.ApprovalRequest{RequestID: "7"}, DefaultApprovalTimeout); p.Seq != 41 {
			t.Fatalf("the pending approval asked again got number %d, want 41", p.Seq)
		} else {
			s.approvals.Remove(p)
		}
		w.open("g")
		if r, err := attached.wait(); err != nil || r.Text == "" {
			t.Fatalf("the message of the handed-over turn: %+v %v", r, err)
		}
		if r, err := queued.wait(); err != nil || r.ThreadID != first.ThreadID {
			t.Fatalf("the message after it: %+v %v", r, err)
		}
		if child.resumed != 1 || w.spawnCount() != 1 || len(w.resumed()) != 0 {
			t.Fatalf("resumed %d, spawns %d, thread resumes %v", child.resumed, w.spawnCount(), w.resumed())
		}
		if got := w.turns(); len(got) != 3 || got[1] != "a:block:g" || got[2] != "a:next" {
			t.Fatalf("turns %v", got)
		}
		shutdown(t, s)
		shutdown(t, old)
	})
}
