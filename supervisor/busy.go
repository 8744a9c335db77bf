package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/molecule-ai/codex-warm/supervisor/progress"
	"github.com/molecule-ai/codex-warm/supervisor/turnwatch"
	"go.uber.org/zap"
)

// What happens to a message for a chat whose turn is running (Config.Busy).

// BusyPolicy says what Submit does with a message for a chat key whose turn is running.
type BusyPolicy string

const (
	// BusyQueue: the message waits and runs as the chat's next turn (the default).
	BusyQueue BusyPolicy = "queue"
	// BusySteer: the message is added to the running turn (turn/steer) and answered by that
	// turn's reply (Reply.Steered). Only when nothing else of the chat waits: a message never
	// jumps ahead of one queued before it. When codex refuses (the turn just ended, or takes no
	// input) the message is queued.
	BusySteer BusyPolicy = "steer"
	// BusyInterrupt: the running turn is interrupted (its Submit returns an error wrapping
	// ErrSuperseded with what the turn had produced) and the message is queued. Messages queued
	// before it are kept and run first, in order; only the running one is interrupted.
	BusyInterrupt BusyPolicy = "interrupt"
)

// ParseBusyPolicy reads a policy name; "" is BusyQueue.
func ParseBusyPolicy(s string) (BusyPolicy, error) {
	switch p := BusyPolicy(s); p {
	case "":
		return BusyQueue, nil
	case BusyQueue, BusySteer, BusyInterrupt:
		return p, nil
	}
	return "", fmt.Errorf("busy policy %q: want %s, %s or %s", s, BusyQueue, BusySteer, BusyInterrupt)
}

// ErrSuperseded is the cause of a turn interrupted because a newer message of its chat arrived
// (BusyInterrupt). Submit's error wraps it; the Reply holds what the turn had produced.
var ErrSuperseded = errors.New("interrupted by a newer message")

// liveTurn is a key's running turn as a message arriving under BusySteer sees it.
type liveTurn struct {
	child    Child
	threadID string
	act      *progress.Activity // what the turn is doing now; see ChildStatus.Activity
	watch    *turnwatch.Watch

	// known is closed once codex answered turn/start (turnID set) or the turn ended: a message
	// steered before then waits for it rather than queueing behind the whole turn.
	known chan struct{}

	mu     sync.Mutex
	turnID string // "" until codex answered turn/start
	ended  bool
	out    outcome // the turn's outcome, once ended
	joined []*job  // messages steered into the turn; they get its outcome
}

func newLiveTurn(child Child, threadID string, act *progress.Activity, watch *turnwatch.Watch) *liveTurn {
	return &liveTurn{child: child, threadID: threadID, act: act, watch: watch, known: make(chan struct{})}
}

func (lt *liveTurn) started(turnID string) {
	lt.mu.Lock()
	lt.turnID = turnID
	lt.markKnownLocked()
	lt.mu.Unlock()
	lt.act.Started(turnID)
}

func (lt *liveTurn) markKnownLocked() {
	select {
	case <-lt.known:
	default:
		close(lt.known)
	}
}

// finish records the turn's outcome and answers the messages steered into it.
func (lt *liveTurn) finish(o outcome) {
	lt.mu.Lock()
	lt.ended, lt.out = true, o
	lt.markKnownLocked()
	joined := lt.joined
	lt.joined = nil
	lt.mu.Unlock()
	o.reply.Steered = true
	for _, j := range joined {
		j.done <- o
	}
}

// interrupt ends k's running message for a newer one (BusyInterrupt). A Reset is not
// interrupted: it is quick, and the chat asked for it.
func (t *table) interrupt(k *keyState) {
	if t.cfg.Busy != BusyInterrupt || k.stopRun == nil || k.running == nil || k.running.reset {
		return
	}
	k.stopRun(ErrSuperseded)
	t.log.Info("interrupting the chat's running turn for a newer message", zap.String("chat_key", k.key))
}

// steerTarget returns k's running turn when j can be steered into it: BusySteer, a turn
// running, and nothing of the chat waiting (j would jump ahead of it).
func (t *table) steerTarget(k *keyState) *liveTurn {
	if t.cfg.Busy != BusySteer || k.live == nil || t.queue.LenLocked(k.key) > 0 {
		return nil
	}
	return k.live
}

// steer adds j's text to the running turn lt, once codex gave the turn its id. ok false: codex
// did not take it (the turn ended, or refused, or ctx ended first), and j must be queued. Otherwise j is answered with the turn's
// outcome (Reply.Steered set): now holds it when the turn already ended, else it comes on j.done.
func (c *chats) steer(ctx context.Context, k *keyState, lt *liveTurn, j *job) (now *outcome, ok bool) {
	select {
	case <-lt.known: // codex answers turn/start at once; a turn that never starts ends
	case <-ctx.Done():
		return nil, false
	}
	turnID, ended := lt.state()
	if turnID == "" || ended {
		return nil, false
	}
	log := c.log.With(zap.String("chat_key", k.key), zap.String("thread_id", lt.threadID), zap.String("turn_id", turnID))
	if err := lt.child.SteerTurn(ctx, lt.threadID, turnID, userInput(j.opts.text, j.opts.images)); err != nil {
		log.Info("could not add the message to the running turn; it waits for its own turn", zap.Error(err))
		return nil, false
	}
	log.Info("message added to the running turn")
	return lt.join(j), true
}

// state is the turn's id ("" until codex answered turn/start) and whether it ended.
func (lt *liveTurn) state() (turnID string, ended bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.turnID, lt.ended
}

// join makes j, steered into the turn, wait for the turn's outcome; when the turn ended
// already (codex took the text while the turn ran, so its outcome answers it), it returns it.
func (lt *liveTurn) join(j *job) *outcome {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		o := lt.out
		o.reply.Steered = true
		return &o
	}
	lt.joined = append(lt.joined, j)
	return nil
}

// leave takes j out of the messages waiting for the turn's outcome: its caller left.
func (lt *liveTurn) leave(j *job) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.joined = slices.DeleteFunc(lt.joined, func(q *job) bool { return q == j })
}

// steered is the number of messages steered into the turn that wait for its outcome.
func (lt *liveTurn) steered() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.joined)
}
