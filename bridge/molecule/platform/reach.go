package platform

import (
	"sync"
	"time"
)

// Platform calls whose outcome says whether the platform can be reached.
const (
	CallPoll      = "poll"
	CallHeartbeat = "heartbeat"
	CallAck       = "ack"
)

// Reachability decides, from the outcome of every poll and heartbeat, whether the platform can
// be reached, so that an outage is logged twice (when it starts and when it ends) rather than
// once per poll, every second, for as long as it lasts. The platform is unreachable from the
// first failed call, and reachable again once every kind of call that failed has gone through:
// a platform whose polls work but whose heartbeats keep failing is not declared back at every
// poll, which would log a line per poll again.
type Reachability struct {
	mu       sync.Mutex
	failing  map[string]bool // kinds of call whose last try failed
	since    time.Time       // when the outage began
	failures int             // failed calls in the outage
}

// failed records a failed call of that kind and reports whether it begins an outage.
func (r *Reachability) Failed(call string, now time.Time) (begins bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	begins = len(r.failing) == 0
	if begins {
		r.failing = make(map[string]bool)
		r.since, r.failures = now, 0
	}
	r.failing[call] = true
	r.failures++
	return begins
}

// succeeded records a call of that kind that went through. It reports whether that ends an
// outage, with how long it lasted and how many calls failed in it.
func (r *Reachability) Succeeded(call string, now time.Time) (ends bool, lasted time.Duration, failures int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failing[call] {
		return false, 0, 0
	}
	delete(r.failing, call)
	if len(r.failing) > 0 {
		return false, 0, 0
	}
	return true, now.Sub(r.since), r.failures
}
