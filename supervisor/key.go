package supervisor

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/molecule-ai/codex-warm/internal/keyfifo"
	"github.com/molecule-ai/codex-warm/supervisor/account"
	"go.uber.org/zap"
)

// chats is the chat path: each chat's key state and queue (keyfifo: a worker per chat with work),
// what a message does to a running turn (busy.go), a turn's run (turn.go), the chat's own
// controls (/stop, /new, /status: control.go) and the long-thread policy (compact.go); the
// approvals it asks are approvalBoard's. It is guarded by Supervisor.mu (mu points at it), with
// the pool, whose children it runs turns on; the keyfifo runs on that lock too. Its fields are
// touched only in its files (owners_test.go).
type chats struct {
	chatsDeps // what it is handed; the rest is its own state

	keys  map[string]*keyState
	queue *keyfifo.FIFO[*job] // per chat key: the jobs waiting, and the key's worker
	stops stopMarks           // when each chat last asked to stop (control.go)

	compactions     atomic.Int64 // threads compacted by the long-thread policy
	compactFailures atomic.Int64 // compactions the policy asked for that failed
}

// chatsDeps is what New hands the chat path: the Supervisor's config, lock and life, and the
// parts a chat's turn uses.
type chatsDeps struct {
	cfg       *Config
	log       *zap.Logger
	mu        *sync.Mutex     // Supervisor.mu
	life      context.Context // cancelled when the drain deadline passes: running turns end
	pool      *pool
	handover  *freeze
	approvals *approvalBoard
	archive   *archiver
	model     *account.Model
	limits    *account.Limits
	usage     *account.Usage
}

func newChats(d chatsDeps) *chats {
	c := &chats{chatsDeps: d, keys: make(map[string]*keyState)}
	c.queue = keyfifo.New(keyfifo.Config[*job]{Run: c.work, Take: c.takeLocked, Idle: c.keyIdleLocked, Lock: c.mu})
	return c
}

// queuedLocked is the number of chatKey's messages waiting.
func (c *chats) queuedLocked(chatKey string) int { return c.queue.LenLocked(chatKey) }

// queuedTotalLocked is the number of messages waiting, of every chat.
func (c *chats) queuedTotalLocked() int {
	n := 0
	for _, k := range c.keys {
		n += c.queue.LenLocked(k.key)
	}
	return n
}

// busyLocked reports whether chatKey has work: a job running or waiting.
func (c *chats) busyLocked(chatKey string) bool { return c.queue.BusyLocked(chatKey) }

// eachQueuedLocked calls fn for each of chatKey's waiting jobs, in order.
func (c *chats) eachQueuedLocked(chatKey string, fn func(*job)) { c.queue.EachLocked(chatKey, fn) }

// pushLocked queues j behind chatKey's other jobs.
func (c *chats) pushLocked(chatKey string, j *job) { c.queue.PushLocked(chatKey, j) }

// takeQueuedLocked takes every job waiting for chatKey out of its queue.
func (c *chats) takeQueuedLocked(chatKey string) []*job {
	return c.queue.RemoveAllLocked(chatKey, func(*job) bool { return true })
}

// eachKeyLocked calls fn for every chat key known.
func (c *chats) eachKeyLocked(fn func(*keyState)) {
	for _, k := range c.keys {
		fn(k)
	}
}

// closeLocked takes every waiting job out of the queues (Shutdown): they get ErrClosed. A turn
// the previous image handed over stays: it runs in its child already, and the message given
// again attaches to it even now (enqueue), so the drain lets it run to its end like any
// running turn. Every chat with a queue has its key here (gcKeyLocked keeps a busy one).
func (c *chats) closeLocked() []*job {
	var out []*job
	for key := range c.keys {
		out = append(out, c.queue.RemoveAllLocked(key, func(j *job) bool { return !j.adopted })...)
	}
	return out
}

// wait returns once every chat's worker exited.
func (c *chats) wait() { c.queue.Wait() }

// compactCounts is the long-thread policy's compactions, done and failed.
func (c *chats) compactCounts() (done, failed int64) {
	return c.compactions.Load(), c.compactFailures.Load()
}

// keyState is the per chat key bookkeeping. It lives while the key has work, a child, or a
// pending crash backoff.
type keyState struct {
	key  string
	sess *session

	restarts    int  // children started after a watchdog retirement or failed start
	needRestart bool // the next spawn is a restart

	crash crashBackoff

	// running is the job the key's worker runs now and stopRun ends it (cause ErrStopped);
	// both nil between jobs. lastErr is the error of the key's last message, "" after a success.
	running *job
	stopRun context.CancelCauseFunc
	// live is the key's running turn, which a message can be steered into (BusySteer); nil
	// between turns.
	live    *liveTurn
	lastErr string
}

// gcKeyLocked forgets a key with no work, no child, no pending backoff and no restart to count.
// A key whose child a watchdog retired is kept (a few hundred bytes) so that its next child
// reports the restart.
func (c *chats) gcKeyLocked(k *keyState) {
	if !c.queue.BusyLocked(k.key) && k.sess == nil && !k.crash.pending() && !k.needRestart &&
		c.keys[k.key] == k {
		delete(c.keys, k.key)
	}
}
