package supervisor

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor/hosts"
)

// The state table and the pool are built here without New, on a fake spawn: the transitions
// are the table's methods, and the slow work (a spawn, a slot's wait, a watcher) reports back
// through stateTable.do. A decision that spans the chats and the pool (an eviction picks an
// idle child whose chat has nothing queued) is made in one look at the table.
func TestStateTableWithoutNew(t *testing.T) {
	t.Parallel()
	w := newFakeWorld()
	cfg, err := Config{Spawn: w.spawn, MaxChildren: 1, Logger: zap.NewNop()}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	accepting, stop := context.WithCancelCause(context.Background())
	defer stop(ErrClosed)
	var wg sync.WaitGroup
	st := newStateTable(tableDeps{cfg: &cfg, log: cfg.Logger, kickSpares: func() {}, drainTimer: func(*hosts.Host) {}},
		func(string, *job) { t.Error("no job is queued in this test") })
	p := newPool(poolDeps{cfg: &cfg, log: cfg.Logger, st: st, wg: &wg, accepting: accepting,
		archive: newArchiver(&cfg, cfg.Logger, nil, nil, nil)})

	// Chat a's first message: no child, so its worker starts one in the one slot.
	var a *keyState
	st.do(func(tb *table) { a = tb.key("a") })
	sess, err := p.acquire(a, &job{ctx: context.Background(), opts: turnOptions{text: "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	st.do(func(tb *table) {
		if sess.state != StateBusy || a.sess != sess || tb.slots.Held() != 1 || w.spawnCount() != 1 {
			t.Fatalf("after the first message: state %s, the key's session %p (want %p), %d slots held, %d spawns",
				sess.state, a.sess, sess, tb.slots.Held(), w.spawnCount())
		}
		// Its turn ends well: the child is idle again, and counted.
		if wd, retiring, recycled := tb.turnSettled(sess, turnEnd{settled: true}, nil); wd != "" || retiring || recycled {
			t.Fatalf("turnSettled: watchdog %q, retiring %v, recycled %v", wd, retiring, recycled)
		}
		if sess.state != StateIdle || tb.turns != 1 {
			t.Fatalf("after the turn: state %s, %d turns", sess.state, tb.turns)
		}
	})

	// Another chat waits for the one slot: the table retires a's idle child, whose chat has
	// nothing queued, and its watcher frees the slot for the waiter.
	if err := p.acquireSlot(context.Background()); err != nil {
		t.Fatalf("the second chat's slot: %v", err)
	}
	<-sess.reaped
	st.do(func(tb *table) {
		if tb.retired[ReasonEvicted] != 1 || a.sess != nil || len(tb.sessions) != 0 {
			t.Fatalf("after the eviction: retired %v, the key's session %p, %d sessions", tb.retired, a.sess, len(tb.sessions))
		}
		if _, kept := tb.keys["a"]; kept {
			t.Fatal("chat a, with no work, child or backoff, is still a key of the table")
		}
	})
	stop(ErrClosed)
	wg.Wait()
}
