package appserver

import (
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// inboundKind says what an inbound item carries.
type inboundKind int

const (
	inNotification inboundKind = iota // a server notification
	inRequest                         // a server-initiated request to answer
	inTurnID                          // the response to turn/start: the running turn's id
	inHold                            // a pause (PauseRunning): the dispatcher holds here
)

// inbound is one item for the dispatcher, in the order the child sent it.
type inbound struct {
	kind     inboundKind
	notif    protocol.Notification
	req      *jsonrpc2.Request
	threadID string // inTurnID
	turnID   string // inTurnID
	hold     *runningHold
	size     int // bytes accounted to the queue
}

// inboundQueue is the FIFO between jsonrpc2's read goroutine, which must never block, and the
// client's dispatcher goroutine. It is unbounded, because dropping a notification would corrupt a
// turn and blocking would stall replies to our own calls, but it is accounted: its length and
// bytes are tracked and growth is reported through onGrow.
type inboundQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []inbound
	head   int
	bytes  int64
	closed bool

	warnAt int                      // next length at which onGrow fires (doubles each time)
	onGrow func(n int, bytes int64) // called with mu held; must not block
}

func newInboundQueue(onGrow func(n int, bytes int64)) *inboundQueue {
	q := &inboundQueue{warnAt: 1024, onGrow: onGrow}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push appends it and reports false when the queue is closed (the item is dropped: nobody will
// dispatch it any more).
func (q *inboundQueue) push(it inbound) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.items = append(q.items, it)
	q.bytes += int64(it.size)
	if n := len(q.items) - q.head; n >= q.warnAt {
		q.warnAt *= 2
		q.onGrow(n, q.bytes)
	}
	q.cond.Signal()
	return true
}

// pop blocks until an item is available and returns it, or returns false once the queue is
// closed and drained.
func (q *inboundQueue) pop() (inbound, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head == len(q.items) && !q.closed {
		q.cond.Wait()
	}
	if q.head == len(q.items) {
		return inbound{}, false
	}
	it := q.items[q.head]
	q.items[q.head] = inbound{} // let the payload be collected
	q.head++
	q.bytes -= int64(it.size)
	if q.head == len(q.items) {
		// Drained: reuse the backing array from the start.
		q.items, q.head = q.items[:0], 0
		if cap(q.items) > 4096 {
			q.items = nil
		}
	}
	return it, true
}

// close stops accepting items; pop still returns what is queued.
func (q *inboundQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}
