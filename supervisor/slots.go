package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor/slots"
	"go.uber.org/zap"
)

// lruIdle picks the eviction victim among sessions: a ready spare if there is one (it serves no
// chat yet), else the least recently used idle child whose chat key has nothing queued. A child
// between two queued turns of its key is not idle in any useful sense: evicting it would only
// make its key respawn at once, so a slot waiter waits instead (bounded by SlotWait).
func lruIdle(sessions map[*session]struct{}, queued func(key string) int) *session {
	var best *session
	for sess := range sessions {
		if sess.state == StateSpare {
			return sess
		}
		if sess.state != StateIdle || queued(sess.key.key) > 0 {
			continue
		}
		if best == nil || sess.useSeq < best.useSeq {
			best = sess
		}
	}
	return best
}

// acquireSlot takes a free slot (slots), waiting (FIFO, bounded by SlotWait and ctx) while none
// is free; with MaxSlotWaiters keys waiting already it refuses at once. A waiter makes the least
// recently used idle child retire for it.
func (p *pool) acquireSlot(ctx context.Context) error {
	var w *slots.Waiter
	var err error
	if p.st.do(func(t *table) { w, err = t.joinSlot() }); w == nil {
		return err
	}
	timer := time.NewTimer(p.cfg.SlotWait)
	defer timer.Stop()
	select {
	case <-w.Ready():
		return w.Err()
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-timer.C:
		err = fmt.Errorf("waited %s for a codex slot (at most %d children, memory budget %s): %w",
			p.cfg.SlotWait, p.cfg.MaxChildren, budgetText(p.cfg.MemoryBudget), ErrNoSlot)
	}
	p.st.do(func(t *table) { err = t.leaveSlot(w, ctx.Err() == nil, err) })
	return err
}

// joinSlot takes a free slot (nil, nil) or joins the waiters (w); it errs when closed or when
// too many wait.
func (t *table) joinSlot() (*slots.Waiter, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if t.slots.Take(t.memory()) {
		return nil, nil
	}
	w, err := t.slots.Join()
	if err != nil {
		return nil, err
	}
	t.rebalance()
	return w, nil
}

// leaveSlot ends w's wait, which ended with err (wanted: its caller still wants the slot): a
// slot granted just as the wait ran out is used (nil) when wanted and freed when not.
func (t *table) leaveSlot(w *slots.Waiter, wanted bool, err error) error {
	switch {
	case w.Granted() && wanted:
		return nil // granted just as the wait ran out: use it
	case w.Granted():
		t.releaseSlot()
	case w.Err() != nil:
		return w.Err()
	default:
		t.slots.Leave(w)
	}
	return err
}

// releaseSlot frees one slot and serves the waiters.
func (t *table) releaseSlot() {
	t.slots.Release()
	t.serveWaiters()
}

// serveWaiters grants the waiters what is free now and evicts idle children for the rest.
func (t *table) serveWaiters() {
	if t.slots.Waiting() == 0 {
		return
	}
	t.slots.Grant(t.memory())
	t.rebalance()
}

// rebalance retires idle children until every slot waiter will find a free slot once the
// retiring children are gone. Each eviction frees a slot and the child's memory; when the budget
// is held by busy children, evicting every idle one may still not be enough, and the waiters wait
// for turns to end (bounded by SlotWait).
func (t *table) rebalance() {
	for t.slots.Short(t.memory()) {
		v := t.victim()
		if v == nil {
			return
		}
		v.log.Info("evicting least recently used idle child", zap.Int("waiting", t.slots.Waiting()),
			zap.Int64("pss_bytes", v.mem.PSS))
		t.retire(v, ReasonEvicted, nil)
	}
}

// victim picks the child to evict for a slot waiter, nil when none may go.
func (t *table) victim() *session {
	return lruIdle(t.sessions, t.queued)
}

// budgetText renders a memory budget for messages.
func budgetText(b int64) string {
	if b <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
