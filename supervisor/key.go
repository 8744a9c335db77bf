package supervisor

import (
	"context"
	"sync/atomic"

	"github.com/molecule-ai/codex-warm/supervisor/account"
	"github.com/molecule-ai/codex-warm/supervisor/approvals"
	"go.uber.org/zap"
)

// chats is the chat path's slow work: a message's way into its key's queue (queue.go), what a
// message does to a running turn (busy.go), a turn's run (turn.go), the chat's own controls
// (/stop, /new, /status: control.go) and the long-thread policy (compact.go); the approvals it
// asks are on the approvals board. The keys and queues are the state table's (table.go): chats reads
// and changes them through stateTable.do.
type chats struct {
	chatsDeps // what it is handed; the rest is its own state

	compactions     atomic.Int64 // threads compacted by the long-thread policy
	compactFailures atomic.Int64 // compactions the policy asked for that failed
}

// chatsDeps is what New hands the chat path: the Supervisor's config, state table and life, and
// the parts a chat's turn uses.
type chatsDeps struct {
	cfg       *Config
	log       *zap.Logger
	st        *stateTable
	life      context.Context // cancelled when the drain deadline passes: running turns end
	pool      *pool
	approvals *approvals.Board
	archive   *archiver
	model     *account.Model
	limits    *account.Limits
	usage     *account.Usage
}

func newChats(d chatsDeps) *chats { return &chats{chatsDeps: d} }

// queued is the number of chatKey's messages waiting.
func (t *table) queued(chatKey string) int { return t.queue.LenLocked(chatKey) }

// queuedTotal is the number of messages waiting, of every chat.
func (t *table) queuedTotal() int {
	n := 0
	for _, k := range t.keys {
		n += t.queue.LenLocked(k.key)
	}
	return n
}

// busy reports whether chatKey has work: a job running or waiting.
func (t *table) busy(chatKey string) bool { return t.queue.BusyLocked(chatKey) }

// takeQueued takes every job waiting for chatKey out of its queue.
func (t *table) takeQueued(chatKey string) []*job {
	return t.queue.RemoveAllLocked(chatKey, func(*job) bool { return true })
}

// eachKey calls fn for every chat key known.
func (t *table) eachKey(fn func(*keyState)) {
	for _, k := range t.keys {
		fn(k)
	}
}

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

// gcKey forgets a key with no work, no child, no pending backoff and no restart to count.
// A key whose child a watchdog retired is kept (a few hundred bytes) so that its next child
// reports the restart.
func (t *table) gcKey(k *keyState) {
	if !t.queue.BusyLocked(k.key) && k.sess == nil && !k.crash.pending() && !k.needRestart &&
		t.keys[k.key] == k {
		delete(t.keys, k.key)
	}
}
