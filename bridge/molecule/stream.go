package molecule

// The workspace's event stream (docs/molecule.md, "The event stream"): the platform announces
// each new row of the feed on GET /workspaces/{ws}/events/stream, so a message is polled for at
// once instead of at the next poll. The stream is best effort (events are dropped when a
// client's buffer is full, there is no replay, an edge cuts idle streams): it only wakes the
// poll, and a slow safety poll catches what it lost. Our own writes (heartbeats, notifies,
// current_task, upload echoes, tool chips) announce themselves too and never wake it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"go.uber.org/zap"
)

// Event types of the platform's stream (events/broadcaster.go) the inbox reads.
const (
	eventActivityLogged    = "ACTIVITY_LOGGED"
	eventUserMessage       = "USER_MESSAGE"
	eventDelegationDone    = "DELEGATION_COMPLETE"
	eventDelegationFailed  = "DELEGATION_FAILED"
	eventWorkspaceBeat     = "WORKSPACE_HEARTBEAT"
	activityTypeA2AReceive = "a2a_receive"
)

// StreamState is where the subscription to the event stream stands.
type StreamState string

// States of the stream: off (not asked for) → connecting → connected ⇄ reconnecting; absent
// when the platform has no stream (looked for again every streamAbsentRetry).
const (
	StreamOff          StreamState = "off"
	StreamConnecting   StreamState = "connecting"
	StreamConnected    StreamState = "connected"
	StreamReconnecting StreamState = "reconnecting"
	StreamAbsent       StreamState = "absent"
)

const (
	// streamAbsentRetry is how long a platform without the stream (404, 405, 501, not an event
	// stream) is left alone before the daemon looks again: a platform upgrade shows up within it,
	// and the missing route costs a few requests an hour.
	streamAbsentRetry = 10 * time.Minute
	// streamFloor is the least time between two connects, and streamMaxBackoff the longest wait
	// after failures: each connect costs a request from the org's shared bucket.
	streamFloor      = time.Second
	streamMaxBackoff = time.Minute
	// livenessBeats: our own heartbeats come back on the stream as WORKSPACE_HEARTBEAT, so a
	// stream silent for that many heartbeat intervals is dead (a proxy holding a stale connection).
	livenessBeats = 3
)

// pollCause is why a poll ran.
type pollCause int

const (
	causeInterval pollCause = iota // --poll-interval, the stream being down, absent or off
	causeSafety                    // the safety poll while the stream is up
	causeEvent                     // an event that may mean a new row
	causeCatchUp                   // after each connect of the stream
	causeRetry                     // after a failed poll (backoff, a 410)
	causeMore                      // reading on through a page larger than one poll keeps
	numCauses
)

// String names the cause as status and metrics do.
func (c pollCause) String() string {
	return [...]string{"interval", "safety", "event", "catch_up", "retry", "more"}[c]
}

// streamEvent is one frame's JSON: {"type","timestamp","data"} (handlers/sse.go).
type streamEvent struct {
	Type string `json:"type"`
	Data struct {
		ActivityType string  `json:"activity_type"`
		Method       string  `json:"method"`
		SourceID     *string `json:"source_id"`
		DelegationID string  `json:"delegation_id"`
	} `json:"data"`
}

// wakes reports whether ev may mean a new inbound row: a message to us that is not our own
// write. Our notifies come as AGENT_MESSAGE, our heartbeats and current_task as
// WORKSPACE_HEARTBEAT and TASK_UPDATED, our uploads' echo rows and tool chips as ACTIVITY_LOGGED
// of other kinds: none of them wakes the poll.
func (ev streamEvent) wakes(self string) bool {
	switch ev.Type {
	case eventUserMessage, eventDelegationDone, eventDelegationFailed:
		return true
	case eventActivityLogged:
		d := ev.Data
		if d.ActivityType != activityTypeA2AReceive || d.Method == methodUploadReceive || d.Method == "notify" {
			return false
		}
		return d.SourceID == nil || *d.SourceID != self
	}
	return false
}

// streamStats are the stream's counters.
type streamStats struct {
	state    atomic.Value // StreamState
	connects atomic.Int64
	wakeups  atomic.Int64
	mu       sync.Mutex
	events   map[string]int64 // by type; "other" beyond maxEventTypes
}

// maxEventTypes bounds the types counted by name: a platform inventing types cannot grow the
// map (or the metrics' label set) without end.
const maxEventTypes = 32

func newStreamStats() *streamStats {
	s := &streamStats{events: map[string]int64{}}
	s.state.Store(StreamOff)
	return s
}

func (s *streamStats) saw(typ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.events[typ]; !ok && len(s.events) >= maxEventTypes {
		typ = "other"
	}
	s.events[typ]++
}

func (s *streamStats) eventCounts() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.events))
	for k, v := range s.events {
		out[k] = v
	}
	return out
}

func (s *streamStats) current() StreamState { return s.state.Load().(StreamState) }

// streamer keeps the inbox subscribed to the event stream and wakes the poll loop.
type streamer struct {
	c       *platform.Client
	log     *zap.Logger
	self    string
	stats   *streamStats
	live    time.Duration // silence that declares the stream dead
	timeout time.Duration // for the answer's headers
	// wake asks the poll loop for a poll (event, catch-up); changed tells it the stream went up
	// or down (its interval changes).
	wake    func(pollCause)
	changed func()
	// delegated hears of each DELEGATION_* event: its row may come after it (delegationpoll.go).
	delegated func(delegationID string)
}

// run subscribes until ctx ends: connect, read events, reconnect with a jittered backoff (no
// two connects closer than streamFloor), and look again every streamAbsentRetry on a platform
// without the stream. Only the first connect is not optional traffic (see rateGate.optional).
func (s *streamer) run(ctx context.Context) {
	bo := platform.NewBackoff(streamFloor, streamMaxBackoff)
	bo.RandomizationFactor = 0.5
	first := true
	for ctx.Err() == nil {
		if !first && !s.c.Optional(time.Now()) {
			// Reconnects beyond the first spend what replies and polls need: wait for the next
			// window, polling at --poll-interval meanwhile.
			s.setState(StreamReconnecting)
			if !platform.Sleep(ctx, s.c.WindowLeft(time.Now())+streamFloor) {
				return
			}
			continue
		}
		first = false
		s.stats.connects.Add(1)
		began := time.Now()
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := bo.NextBackOff()
		switch {
		case errors.Is(err, platform.ErrStreamAbsent):
			s.setState(StreamAbsent)
			s.log.Info("the platform offers no event stream; polling every --poll-interval and looking again later",
				zap.Error(err), zap.Duration("look_again_in", streamAbsentRetry))
			wait = streamAbsentRetry
		case err != nil:
			s.setState(StreamReconnecting)
			s.log.Info("event stream lost; reconnecting", zap.Error(err), zap.Duration("retry_in", wait))
		}
		if time.Since(began) > streamMaxBackoff {
			bo.Reset() // it was up a good while: this is a fresh failure, not one of a series
			wait = bo.NextBackOff()
		}
		if !platform.Sleep(ctx, max(wait, streamFloor)) {
			return
		}
	}
}

// setState records the state and tells the poll loop when the stream went up or down.
func (s *streamer) setState(st StreamState) {
	if prev := s.stats.current(); prev != st {
		s.stats.state.Store(st)
		s.changed()
	}
}

// session is one connect: it returns when the stream ends (platform.ErrStreamAbsent: the platform has
// none; nil: it ended cleanly; else why it broke).
func (s *streamer) session(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := s.c.OpenEventStream(ctx, cancel, s.timeout)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	s.setState(StreamConnected)
	s.log.Info("event stream connected: messages are polled for as they arrive")
	// Whatever landed while the stream was down was announced to nobody.
	s.wake(causeCatchUp)
	silent := time.AfterFunc(s.live, func() {
		cancel(fmt.Errorf("no event for %s (our heartbeats come back on the stream)", s.live))
	})
	defer silent.Stop()
	err = s.read(resp.Body, func() { silent.Reset(s.live) })
	if c := context.Cause(ctx); c != nil && ctx.Err() != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	if errors.Is(err, io.EOF) {
		return errors.New("the platform ended the stream")
	}
	return err
}

// read reads events from body until it ends, calling alive on every line and waking the poll
// for events that may mean a new row.
func (s *streamer) read(body io.Reader, alive func()) error {
	return platform.ReadEvents(body, alive, s.event)
}

// event handles one event's data.
func (s *streamer) event(data []byte, tooLong bool) {
	var ev streamEvent
	switch {
	case tooLong:
		ev.Type = "oversized"
	case json.Unmarshal(data, &ev) != nil || ev.Type == "":
		ev.Type = "unreadable"
	}
	s.stats.saw(ev.Type)
	// An event the daemon cannot read may be a message: a poll costs less than a late answer.
	if tooLong || ev.Type == "unreadable" || ev.wakes(s.self) {
		s.stats.wakeups.Add(1)
		s.wake(causeEvent)
	}
	if (ev.Type == eventDelegationDone || ev.Type == eventDelegationFailed) && s.delegated != nil {
		s.delegated(ev.Data.DelegationID)
	}
}

// idleInterval is the wait between polls: the safety poll's while the event stream is up,
// PollInterval otherwise.
func (f *feed) idleInterval() time.Duration {
	if f.stream.current() == StreamConnected {
		return f.cfg.SafetyPollInterval
	}
	return f.cfg.PollInterval
}

// idleCause is why a poll at the end of the idle wait runs.
func (f *feed) idleCause() pollCause {
	if f.stream.current() == StreamConnected {
		return causeSafety
	}
	return causeInterval
}

// wakePoll asks the poll loop for a poll now; a poll already waiting covers it.
func (f *feed) wakePoll(c pollCause) {
	select {
	case f.pollWake <- c:
	default:
	}
}

// streamChanged tells the poll loop the stream went up or down.
func (f *feed) streamChanged() {
	select {
	case f.streamMoved <- struct{}{}:
	default:
	}
}

// startStream subscribes to the event stream on wg until ctx ends.
func (f *feed) startStream(ctx context.Context, wg *sync.WaitGroup) {
	st := &streamer{c: f.client, log: f.log.Named("stream"), self: f.cfg.WorkspaceID, stats: f.stream,
		live: livenessBeats * f.cfg.HeartbeatInterval, timeout: f.cfg.RequestTimeout,
		wake: f.wakePoll, changed: f.streamChanged, delegated: f.delegations.announce}
	f.stream.state.Store(StreamConnecting)
	wg.Go(func() { st.run(ctx) })
	wg.Go(func() { f.delegations.run(ctx) })
}
