package supervisor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// The chat's retention drops its model and effort with its thread; a chat that stays keeps them.
func TestRetentionForgetsChatSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		day := 24 * time.Hour
		w := newFakeWorld()
		w.threads["thread-c"] = []string{"old c"}
		w.threads["thread-d"] = []string{"old d"}
		t0 := time.Now()
		var mu sync.Mutex
		var forgot []string
		s, _, _ := retentionEnv(t, w, map[string]time.Time{"c": t0, "d": t0.Add(39 * day)},
			map[string]string{"c": "thread-c", "d": "thread-d"}, retention.Policy{IdleAfter: 30 * day},
			func(c *Config) {
				c.ForgetSettings = func(key string) error {
					mu.Lock()
					defer mu.Unlock()
					forgot = append(forgot, key)
					return nil
				}
			})
		defer shutdown(t, s)
		time.Sleep(40 * day)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(forgot, []string{"c"}) {
			t.Errorf("settings forgotten for %v, want the archived chat c alone", forgot)
		}
	})
}

// A chat job on a chat without a conversation starts nothing; Jobs unbound answer ErrClosed.
func TestChatJobsWithoutConversation(t *testing.T) {
	w := newFakeWorld()
	jobs := &chatjob.Jobs{}
	if _, err := jobs.Compact(context.Background(), "k"); !errors.Is(err, chatjob.ErrClosed) {
		t.Errorf("unbound: %v", err)
	}
	s := newSup(t, w, func(c *Config) { c.Jobs = jobs })
	defer shutdown(t, s)
	if _, err := jobs.Compact(context.Background(), "k"); !errors.Is(err, chatjob.ErrNoConversation) {
		t.Errorf("compact without a conversation: %v", err)
	}
	if _, err := jobs.Undo(context.Background(), "k", 1); !errors.Is(err, chatjob.ErrNoConversation) {
		t.Errorf("undo without a conversation: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.spawns != 0 {
		t.Errorf("%d children started for nothing", w.spawns)
	}
}
