package molecule

import (
	"sync"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/internal/keyfifo"
)

// job is one unit of work for a chat key: a message to answer and deliver, or (recovered from
// the state file) a reply to deliver only.
type job struct {
	msg     message
	pending *ledger.Reply
	// cmd is set when msg is a chat command: it runs on the chat's command queue (queueKey), so
	// it does not wait behind the chat's running turn.
	cmd *chat.Command
	// resetQueued marks a /new command whose Reset waits on the chat's own queue (a reset job)
	// behind the chat's earlier messages: the command only answers that it is deferred.
	resetQueued bool
	// reset marks the Reset of a /new already answered (resetQueued), on the chat's own queue:
	// it runs after the messages received before the /new and before those received after it.
	reset bool
}

// commandQueueSuffix names a chat's command queue: the chat key plus a byte no chat key has.
const commandQueueSuffix = "\x00commands"

// queueKey is the dispatcher queue j runs on: its chat's, or the chat's command queue.
func (j job) queueKey() string {
	if j.cmd != nil && !j.onChatQueue() {
		return j.chatKey() + commandQueueSuffix
	}
	return j.chatKey()
}

// onChatQueue reports whether j is a /new that runs on its chat's own queue: nothing of the chat
// was queued when it arrived, so it runs at once and the chat's later messages wait for it.
func (j job) onChatQueue() bool { return j.cmd != nil && j.cmd.Name == chat.CmdNew && !j.resetQueued }

func (j job) chatKey() string {
	if j.pending != nil {
		return j.pending.ChatKey
	}
	return j.msg.ChatKey
}

func (j job) activityID() string {
	if j.pending != nil {
		return j.pending.ActivityID
	}
	return j.msg.ActivityID
}

// dispatcher runs jobs of one chat key in order and jobs of different keys in parallel: a
// goroutine per key with queued work, which exits when its queue is empty. The number of such
// goroutines is bounded by the unacked window (MaxUnacked). The expensive part, the turn, is
// bounded by the supervisor's pool alone. A job whose turn the pool refuses as busy waits on its
// key's goroutine and tries again (Inbox.submit): other keys go on, and its key's later jobs
// stay behind it.
type dispatcher struct {
	mu   sync.Mutex // the FIFO's lock: enqueueNew looks at a queue and pushes in one step
	fifo *keyfifo.FIFO[job]
	// inTurn counts each chat's messages being answered (answering, undoheld.go); under mu.
	inTurn map[string]int
}

func newDispatcher(handle func(job)) *dispatcher {
	d := &dispatcher{}
	d.fifo = keyfifo.New(keyfifo.Config[job]{Run: func(_ string, j job) { handle(j) }, Lock: &d.mu})
	return d
}

// enqueue appends j to its key's queue, starting the key's worker when it has none.
func (d *dispatcher) enqueue(j job) { d.fifo.Push(j.queueKey(), j) }

// enqueueNew queues a /new so that the chat's messages received before it reach the supervisor
// before its Reset, and those received after it, after. With nothing of the chat queued, the
// command runs on the chat's own queue, at once. Otherwise a reset job waits there behind the
// earlier messages, and the command, on the command queue, answers at once that the chat starts
// over after them. The command queue alone would let the Reset overtake a message received
// before it (both workers start together), and move that message onto the new thread.
func (d *dispatcher) enqueueNew(j job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := j.chatKey()
	if d.fifo.BusyLocked(key) {
		d.fifo.PushLocked(key, job{msg: j.msg, reset: true})
		j.resetQueued = true
	}
	d.fifo.PushLocked(j.queueKey(), j)
}

// dropMessages takes chatKey's messages that wait for their turn out of the queue (not replies
// waiting for delivery, not commands, not a /new's Reset: a /new sent before the /stop still
// applies) and returns them.
func (d *dispatcher) dropMessages(chatKey string) []job {
	return d.fifo.RemoveAll(chatKey, func(j job) bool { return j.pending == nil && j.cmd == nil && !j.reset })
}

// answering marks a message of chatKey as being answered (its turn tried, waited for, run)
// until done is called, before its reply is delivered.
func (d *dispatcher) answering(chatKey string) (done func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inTurn == nil {
		d.inTurn = map[string]int{}
	}
	d.inTurn[chatKey]++
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.inTurn[chatKey]--; d.inTurn[chatKey] <= 0 {
			delete(d.inTurn, chatKey)
		}
	}
}

// holds reports whether this inbox holds a message of chatKey that is not answered yet: one
// being answered (answering), or one waiting behind it on the chat's queue.
func (d *dispatcher) holds(chatKey string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	held := d.inTurn[chatKey] > 0
	d.fifo.EachLocked(chatKey, func(j job) { held = held || (j.cmd == nil && j.pending == nil && !j.reset) })
	return held
}

// wait returns when every worker has exited.
func (d *dispatcher) wait() { d.fifo.Wait() }
