package bridge

import "sync"

// job is one unit of work for a chat key: a message to answer and deliver, or (recovered from
// the state file) a reply to deliver only.
type job struct {
	msg     message
	pending *pendingReply
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
// goroutines is bounded by the unacked window (MaxUnacked); concurrency of the expensive part
// (Submit) is bounded separately by the handler.
type dispatcher struct {
	handle func(job)

	mu     sync.Mutex
	queues map[string][]job
	wg     sync.WaitGroup
}

func newDispatcher(handle func(job)) *dispatcher {
	return &dispatcher{handle: handle, queues: make(map[string][]job)}
}

// enqueue appends j to its key's queue, starting the key's worker when it has none.
func (d *dispatcher) enqueue(j job) {
	key := j.chatKey()
	d.mu.Lock()
	defer d.mu.Unlock()
	if q, busy := d.queues[key]; busy {
		d.queues[key] = append(q, j)
		return
	}
	d.queues[key] = []job{j}
	d.wg.Add(1)
	go d.work(key)
}

// work handles the key's jobs until its queue is empty. The head job stays in the queue while it
// runs, so enqueue sees the key as busy and does not start a second worker.
func (d *dispatcher) work(key string) {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		j := d.queues[key][0]
		d.mu.Unlock()

		d.handle(j)

		d.mu.Lock()
		q := d.queues[key][1:]
		if len(q) == 0 {
			delete(d.queues, key)
			d.mu.Unlock()
			return
		}
		d.queues[key] = q
		d.mu.Unlock()
	}
}

// wait returns when every worker has exited.
func (d *dispatcher) wait() { d.wg.Wait() }
