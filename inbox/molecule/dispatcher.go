package molecule

import (
	"github.com/molecule-ai/codex-warm/inbox/chat"
	"github.com/molecule-ai/codex-warm/internal/keyfifo"
)

// job is one unit of work for a chat key: a message to answer and deliver, or (recovered from
// the state file) a reply to deliver only.
type job struct {
	msg     message
	pending *pendingReply
	// cmd is set when msg is a chat command: it runs on the chat's command queue (queueKey), so
	// it does not wait behind the chat's running turn.
	cmd *chat.Command
}

// commandQueueSuffix names a chat's command queue: the chat key plus a byte no chat key has.
const commandQueueSuffix = "\x00commands"

// queueKey is the dispatcher queue j runs on: its chat's, or the chat's command queue.
func (j job) queueKey() string {
	if j.cmd != nil {
		return j.chatKey() + commandQueueSuffix
	}
	return j.chatKey()
}

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
	fifo *keyfifo.FIFO[job]
}

func newDispatcher(handle func(job)) *dispatcher {
	return &dispatcher{fifo: keyfifo.New(keyfifo.Config[job]{Run: func(_ string, j job) { handle(j) }})}
}

// enqueue appends j to its key's queue, starting the key's worker when it has none.
func (d *dispatcher) enqueue(j job) { d.fifo.Push(j.queueKey(), j) }

// dropMessages takes chatKey's messages that wait for their turn out of the queue (not replies
// waiting for delivery, not commands) and returns them.
func (d *dispatcher) dropMessages(chatKey string) []job {
	return d.fifo.RemoveAll(chatKey, func(j job) bool { return j.pending == nil && j.cmd == nil })
}

// wait returns when every worker has exited.
func (d *dispatcher) wait() { d.fifo.Wait() }
