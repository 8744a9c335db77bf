package supervisor

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/retention"
)

// The thread a chat leaves with /new is archived by the sweep once it has been left for
// IdleAfter, and deleted DeleteAfter later, while the chat goes on with its new thread, which
// is never touched (the fake's turns report no tokens, so the chat itself has no last turn and
// is never idle); a dry run lists the left thread.
func TestRetentionSweepArchivesLeftThreads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		day := 24 * time.Hour
		w := newFakeWorld()
		w.nextThread = 100
		s, st, l := retentionEnv(t, w, nil, nil,
			retention.Policy{IdleAfter: 30 * day, DeleteAfter: 60 * day})
		defer shutdown(t, s)

		first, err := s.Submit(context.Background(), "a", "hello")
		if err != nil {
			t.Fatal(err)
		}
		if r, err := s.Reset(context.Background(), "a"); err != nil || r.OldThreadID != first.ThreadID {
			t.Fatalf("reset %+v %v", r, err)
		}
		second, err := s.Submit(context.Background(), "a", "fresh")
		if err != nil || !second.NewThread || second.ThreadID == first.ThreadID {
			t.Fatalf("after /new: %+v %v", second, err)
		}

		time.Sleep(2 * day)
		synctest.Wait()
		res, err := s.ArchiveSweep(context.Background(), retention.Policy{IdleAfter: day}, true)
		if err != nil || !slices.ContainsFunc(res.Archived, func(c retention.Candidate) bool {
			return c.Left && c.ChatKey == "a" && c.ThreadID == first.ThreadID
		}) {
			t.Fatalf("dry run %+v %v: the left thread is not listed", res, err)
		}
		synctest.Wait()
		if live, _ := w.rollout(first.ThreadID); !live {
			t.Fatal("the dry run archived the left thread")
		}

		time.Sleep(27 * day) // day 29
		synctest.Wait()
		if live, _ := w.rollout(first.ThreadID); !live {
			t.Fatal("the left thread was archived before 30 days")
		}
		time.Sleep(2 * day)
		synctest.Wait()
		if _, archived := w.rollout(first.ThreadID); !archived {
			t.Fatalf("the left thread %s was not archived after 31 days", first.ThreadID)
		}
		if id, _ := st.Get("a"); id != second.ThreadID {
			t.Fatalf("the chat's live thread is %q, want %s", id, second.ThreadID)
		}
		if live, _ := w.rollout(second.ThreadID); !live {
			t.Fatal("the chat's live thread was archived")
		}
		if c := l.Counts(); c.Archived != 1 || c.Left != 1 || c.Current != 0 {
			t.Fatalf("counts %+v", c)
		}

		time.Sleep(61 * day)
		synctest.Wait()
		if live, archived := w.rollout(first.ThreadID); live || archived {
			t.Fatal("the left thread was not deleted")
		}
		if _, ok := l.Lookup("a"); ok {
			t.Fatal("the chat is indexed as archived")
		}
		more, err := s.Submit(context.Background(), "a", "more")
		if err != nil || more.ThreadID != second.ThreadID || more.NewThread {
			t.Fatalf("the chat went on on %+v %v, want %s", more, err, second.ThreadID)
		}
		w.mu.Lock()
		h := w.threads[second.ThreadID]
		w.mu.Unlock()
		if !slices.Equal(h, []string{"fresh", "more"}) {
			t.Fatalf("history %q", h)
		}
		if c := l.Counts(); c.Deleted != 1 || c.Left != 0 || c.Current != 0 {
			t.Fatalf("counts %+v", c)
		}
	})
}

// rollout says which folder thread id's rollout is in: live (sessions) or archived.
func (w *fakeWorld) rollout(id string) (live, archived bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, live = w.threads[id]
	_, archived = w.archivedTh[id]
	return live, archived
}
