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
		var live bool
		c.st.do(func(*table) { live = k.sess != nil && k.sess.threadID != "" })
		if _, stored := c.cfg.Store.Get(k.key); !stored && !live {
			return fmt.Errorf("chat %s: %w", k.key, chatjob.ErrNoConversation)
		}
		sess, err := c.pool.acquire(k, &job{ctx: context.WithoutCancel(ctx), key: k})
		if err != nil {
			return err
		}
		defer c.st.do(func(t *table) { t.jobDoneWith(sess) })
		return fn(chatjob.Session{Child: sess.child, ThreadID: sess.threadID, PID: sess.pid, Log: sess.log,
			AddUsage: func(u projector.Usage) { c.usage.Add(k.key, u) }, Deadline: c.cfg.TurnDeadline})
	})
}

// jobDoneWith returns sess, lent to a chat's job, to idle, unless its child retired meanwhile.
func (t *table) jobDoneWith(sess *session) {
	if sess.state != StateRetiring {
		t.idle(sess)
	}
}
