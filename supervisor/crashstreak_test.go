package supervisor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
)

// Crashes counts the children that crashed since a turn last completed, whatever their chat, and
// a completed turn ends the streak.
func TestCrashesStreakEndsWithACompletedTurn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.spawnHook = func(_ context.Context, _ string, n int) (bool, error) {
			if n <= 3 {
				return false, fmt.Errorf("exec: spawn %d fails", n)
			}
			return false, nil
		}
		s := newSup(t, w, nil)
		defer shutdown(t, s)
		if got := s.Crashes(); got.Crashes != 0 || got.Last != "" {
			t.Fatalf("before any crash: %+v, want none", got)
		}
		for i, key := range []string{"a", "b", "a"} {
			if _, err := s.Submit(context.Background(), key, "hi"); err == nil {
				t.Fatalf("spawn %d: no error", i+1)
			}
		}
		got := s.Crashes()
		if got.Crashes != 3 || !strings.Contains(got.Last, "spawn 3 fails") || got.LastAt.IsZero() {
			t.Fatalf("after three failed spawns of two chats: %+v, want 3 crashes naming the last", got)
		}
		mustSubmit(t, s, "b", "hi")
		if got := s.Crashes(); got.Crashes != 0 || got.Last != "" {
			t.Errorf("after a completed turn: %+v, want the streak over", got)
		}
	})
}
