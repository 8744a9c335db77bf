package supervisor

import (
	"context"
	"fmt"

	"github.com/molecule-ai/codex-warm/projector"
	"github.com/molecule-ai/codex-warm/supervisor/chatjob"
)

// runJob is Config.Jobs' chatjob.Runner: fn gets the chat's session on the chat's worker (its
// thread resumed in a child when none is live); the session goes back to idle after.
func (c *chats) runJob(ctx context.Context, chatKey string, wait bool, fn func(chatjob.Session) error) (bool, error) {
	return c.onWorkerWait(ctx, chatKey, wait, func(k *keyState, _ func()) error {
		c.mu.Lock()
		live := k.sess != nil && k.sess.threadID != ""
		c.mu.Unlock()
		if _, stored := c.cfg.Store.Get(k.key); !stored && !live {
			return fmt.Errorf("chat %s: %w", k.key, chatjob.ErrNoConversation)
		}
		sess, err := c.pool.acquire(k, &job{ctx: context.WithoutCancel(ctx), key: k})
		if err != nil {
			return err
		}
		defer func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if sess.state != StateRetiring {
				c.pool.idleLocked(sess)
			}
		}()
		return fn(chatjob.Session{Child: sess.child, ThreadID: sess.threadID, PID: sess.pid, Log: sess.log,
			AddUsage: func(u projector.Usage) { c.usage.Add(k.key, u) }, Deadline: c.cfg.TurnDeadline})
	})
}
