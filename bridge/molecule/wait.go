package molecule

// One wait for every message that cannot be answered now (docs/molecule.md, "When a message
// cannot be answered now"). A step of a message (its turn, or its reply's delivery) is tried;
// what the try met decides whether the result stands or the message waits, for one reason, no
// sooner than the reason's own earliest time and the backoff, and is tried again. The chat is
// told once per reason; what it was told is in the ledger, so a restart or a reload tells
// nobody twice. The message waits on its chat's worker, so the chat's later messages stay
// behind it and other chats go on.

import (
	"context"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// Why a message cannot be answered now. The names are stored (ledger.Wait) and end the message
// ids of the notices (tell): never rename one.
const (
	reasonBusy             ledger.WaitReason = "busy"                  // the pool has no room; bounded by BusyRetryFor
	reasonModelUnreachable ledger.WaitReason = "model-unreachable"     // codex cannot reach the model service
	reasonUsageLimit       ledger.WaitReason = ledger.ReasonUsageLimit // the account's usage limit, until its reset
	reasonPaused           ledger.WaitReason = "paused"                // the workspace is paused, until resumed
	reasonPlatformDown     ledger.WaitReason = "platform-down"         // no answer, a 5xx, a redirect
	reasonRetryAfter       ledger.WaitReason = "retry-after"           // a 429, or a 503 with Retry-After
	reasonOrgIDMissing     ledger.WaitReason = "org-id-missing"        // the tenant guard wants X-Molecule-Org-Id
	reasonTokenRefused     ledger.WaitReason = "token-refused"         // a 401: kept until the token is fixed
)

// waitState is where a wait stands: retrying (a try runs) → waiting(reason, until) → retrying
// → ... → done (the try's result stands) or failed (given up: the reason outlasts its bound,
// or ctx ended; the last result stands, or nothing when ctx ended).
type waitState int

const (
	stateRetrying waitState = iota
	stateWaiting
	stateDone
	stateFailed
)

// condition is what a try met: nothing (reason ""), and its result stands; or a reason to wait.
type condition struct {
	reason ledger.WaitReason
	// until is the reason's earliest next try (Retry-After, the limit's reset); zero: none.
	until time.Time
	// hold, when set, blocks until the reason lets a try through (the workspace resumed; the
	// usage limit past and the message's turn among those parked); it returns ctx's error.
	hold func(ctx context.Context) error
	// within bounds the wait for this reason, counted from its first try: a next try later than
	// that gives up (busy: BusyRetryFor). Zero: no bound.
	within time.Duration
	// giveUp: the reason will not pass in time (a reset past ParkLimit); the result stands.
	giveUp bool
	// notice is what the chat is told, once per reason; "" tells the log only (the platform is
	// what stands between the chat and its answer, or the chat sees it itself).
	notice string
	// cause is what the try returned, for the log.
	cause error
}

// wait is one message step's way through the conditions that keep it from being answered now.
// It is owned by one goroutine.
type wait struct {
	state  waitState
	reason ledger.WaitReason
	// until is the next try's time, no sooner: the later of the backoff and condition.until.
	until time.Time
	hold  func(context.Context) error
	// since is when the wait for reason began (its first try's end).
	since time.Time
	// told are the reasons the chat was told of (restored from the ledger).
	told []ledger.WaitReason
	bo   *backoff.ExponentialBackOff
}

// newWait is a wait in state retrying, with told restored.
func newWait(initial, maxInterval time.Duration, told []ledger.WaitReason) *wait {
	return &wait{told: slices.Clone(told), bo: platform.NewBackoff(initial, maxInterval)}
}

// settle records what the try that just ended met, at now: retrying → done, failed, or
// waiting(reason, until). A new reason starts the backoff over. It reports whether the chat
// is to be told: the first wait for this reason of the message.
func (w *wait) settle(c condition, now time.Time) (tell bool) {
	switch {
	case c.reason == "":
		w.state = stateDone
		return false
	case c.giveUp:
		w.state = stateFailed
		return false
	}
	if c.reason != w.reason {
		w.reason, w.since = c.reason, now
		w.bo.Reset()
	}
	next := now.Add(w.bo.NextBackOff())
	if c.until.After(next) {
		next = c.until
	}
	if c.within > 0 && next.Sub(w.since) > c.within {
		w.state = stateFailed
		return false
	}
	w.state, w.until, w.hold = stateWaiting, next, c.hold
	if slices.Contains(w.told, c.reason) {
		return false
	}
	w.told = append(w.told, c.reason)
	return true
}

// run tries until a try's result stands (done) or the wait gives up (failed; ctx's error when
// ctx ended it). waiting hears of every wait before it starts: newReason says the reason is not
// the previous try's, tell that the chat is to be told.
func (w *wait) run(ctx context.Context, try func() condition, waiting func(c condition, newReason, tell bool)) error {
	for {
		prev := w.reason
		c := try()
		tell := w.settle(c, time.Now())
		if w.state != stateWaiting {
			return nil
		}
		waiting(c, c.reason != prev, tell)
		// waiting → retrying once the hold lets go and the next try's time has come.
		t := time.NewTimer(time.Until(w.until))
		err := ctx.Err()
		if w.hold != nil {
			err = w.hold(ctx)
		}
		if err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-t.C:
			}
		}
		t.Stop()
		if err != nil {
			w.state = stateFailed
			return err
		}
		w.state = stateRetrying
	}
}
