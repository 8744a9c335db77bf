package molecule

// The waiting: the one wait (wait.go) as the inbox runs it (waits: the ledger's record of it and
// the chat's notices), and what a turn meets there: the pool busy, the model service away, the
// account's usage limit or a paused workspace. What a reply's delivery meets (the platform away,
// its Retry-After, its tenant guard, a refused token) is judged in outbound.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/internal/chatfiles"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// submit runs msg's turn (try) through its wait: while the pool is busy (for BusyRetryFor),
// the model service cannot be reached, the account's usage limit holds (until its reset,
// within ParkLimit of the message's arrival) or the workspace is paused, the row stays
// unacknowledged and the turn is tried again. It returns the result that stood, or one of
// OutcomeClosed when ctx ended the wait. Turns run on drainCtx, waits end with ctx. seq, when
// not 0, is msg's place among its chat's handed-over messages (handedLine).
func (a *answerer) submit(ctx, drainCtx context.Context, log *zap.Logger, msg message, seq uint64, try func() (supervisor.Reply, error)) (supervisor.Reply, error) {
	var (
		reply supervisor.Reply
		err   error
	)
	to := ledger.Reply{ActivityID: msg.ActivityID, ChatKey: msg.ChatKey, Route: msg.Route}
	werr := a.waits.await(ctx, drainCtx, log, to, func() condition {
		if a.pause.isPaused() {
			return a.pausedCondition()
		}
		reply, err = try()
		c := a.turnCondition(log, msg, reply, err)
		if c.reason != "" && !c.giveUp {
			// The attempt failed and the message is tried again: its files go with it. (Only a
			// busy pool's result can still stand, and a turn the pool refused sent nothing.)
			if names := a.replies.dropAttempt(msg.ActivityID); len(names) > 0 {
				log.Info("the failed attempt's files are dropped with it", zap.Strings("files", names))
				if c.notice != "" {
					c.notice += "\n\n" + chatfiles.NotSent(names, whyAttemptFailed)
				}
			}
		}
		if seq != 0 && c.reason != "" && !c.giveUp {
			a.line.set(msg.ChatKey, seq, true)
			hold := c.hold
			c.hold = func(ctx context.Context) error {
				if hold != nil {
					if err := hold(ctx); err != nil {
						return err
					}
				}
				return a.line.await(ctx, msg.ChatKey, seq)
			}
		}
		return c
	}, func(c condition, retryIn time.Duration, newReason bool) {
		switch c.reason {
		case reasonBusy:
			a.c.busyRetries.Add(1)
		case reasonModelUnreachable:
			a.c.unreachableRetries.Add(1)
		case reasonUsageLimit:
			if newReason {
				a.c.parked.Add(1)
			}
		}
		log.Info("the message cannot be answered now; its row stays unacknowledged and it is tried again",
			zap.String("waits_for", string(c.reason)), zap.Error(c.cause), zap.Duration("retry_in", retryIn))
	})
	if seq != 0 {
		a.line.set(msg.ChatKey, seq, false)
	}
	if werr != nil {
		// settle leaves the row for the next run.
		return supervisor.Reply{ChatKey: msg.ChatKey}, fmt.Errorf("stopped while the message waited (%w): %w", werr, supervisor.ErrClosed)
	}
	return reply, err
}

// submitInput is a try of msg's turn (submit's): it runs the turn once through the Answerer,
// with in as codex's input and msg in flight meanwhile.
func (a *answerer) submitInput(drainCtx context.Context, msg message, in supervisor.Input) (supervisor.Reply, error) {
	a.mu.Lock()
	a.inflight[msg.ActivityID] = msg.ChatKey
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.inflight, msg.ActivityID)
		a.mu.Unlock()
	}()
	return a.cfg.Answerer.SubmitInput(drainCtx, msg.ChatKey, in)
}

// sender is the door out of what goes to a chat besides its reply: a wait's notice, a progress
// note, an approval prompt (replies.sendAs).
type sender interface {
	sendAs(ctx context.Context, log *zap.Logger, p *ledger.Reply, key string) error
}

// waits runs a message's steps (its turn, its reply's delivery) through the one wait (wait.go):
// it keeps in the ledger what the message waits for and which reasons its chat was told, and
// tells the chat through out. It holds no state of its own between calls.
type waits struct {
	deps
	out sender
}

func newWaits(d deps, out sender) *waits { return &waits{deps: d, out: out} }

// await runs try through the wait of the message to names until a result stands. It returns
// nil then, or ctx's error when ctx ended a wait. A notice goes to to's chat on tellCtx, once
// per reason, after the ledger holds that it was sent. retrying hears of every try put off;
// newReason says it is the first for its reason in a row.
func (ws *waits) await(ctx, tellCtx context.Context, log *zap.Logger, to ledger.Reply, try func() condition,
	retrying func(c condition, retryIn time.Duration, newReason bool)) error {
	w := newWait(ws.cfg.RetryInitial, ws.cfg.RetryMax, ws.ledger.WaitOf(to.ActivityID).Told)
	return w.run(ctx, try, func(c condition, newReason, tell bool) {
		retrying(c, time.Until(w.until), newReason)
		if !newReason && !tell {
			return
		}
		ws.ledger.SetWait(ledger.Wait{ActivityID: to.ActivityID, Reason: c.reason, Until: c.until, Told: w.told})
		ws.state.sync(log, "recording a waiting message")
		if tell && c.notice != "" {
			ws.tell(tellCtx, log, to, c)
		}
	})
}

// tell sends c's notice to to's chat, once: it is tried once, like a progress note, since the
// answer itself follows. Its message id is the reply id of "<activity id>/<reason>".
func (ws *waits) tell(ctx context.Context, log *zap.Logger, to ledger.Reply, c condition) {
	p := ledger.Reply{ActivityID: to.ActivityID, ChatKey: to.ChatKey, Route: to.Route, Text: ws.red.String(c.notice),
		MessageID: platform.ReplyID(ws.cfg.WorkspaceID, to.ActivityID+"/"+string(c.reason))}
	if err := ws.out.sendAs(ctx, log, &p, p.MessageID); err != nil && ctx.Err() == nil {
		log.Info("notice of a waiting message not delivered", zap.String("reason", string(c.reason)), zap.Error(err))
	}
}

// handedLine keeps a chat's handed-over messages (--busy steer or interrupt) in order while they
// wait: one tries again only when no earlier one of its chat waits, and the chat's next message
// is handed over only when none waits.
type handedLine struct {
	mu      sync.Mutex
	seq     uint64
	waiting map[string][]uint64 // chat key → the seqs of its waiting messages, ascending
	changed chan struct{}
}

// next is the place of a message handed over now.
func (l *handedLine) next() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	return l.seq
}

// set records whether the message seq of chat key waits.
func (l *handedLine) set(key string, seq uint64, waiting bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.DeleteFunc(l.waiting[key], func(x uint64) bool { return x == seq })
	if waiting {
		i, _ := slices.BinarySearch(s, seq)
		s = slices.Insert(s, i, seq)
	}
	if l.waiting == nil {
		l.waiting = make(map[string][]uint64)
	}
	if l.waiting[key] = s; len(s) == 0 {
		delete(l.waiting, key)
	}
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// await returns once no message of chat key before seq waits (seq 0: none at all), or ctx's
// error.
func (l *handedLine) await(ctx context.Context, key string, seq uint64) error {
	for {
		l.mu.Lock()
		s := l.waiting[key]
		if len(s) == 0 || (seq != 0 && s[0] >= seq) {
			l.mu.Unlock()
			return nil
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// pausedCondition: nothing is answered until the workspace is resumed. The chat is not told:
// its owner paused it, and the canvas shows it paused.
func (a *answerer) pausedCondition() condition {
	return condition{reason: reasonPaused, hold: a.pause.wait}
}

// turnCondition judges a turn's result.
func (a *answerer) turnCondition(log *zap.Logger, msg message, reply supervisor.Reply, err error) condition {
	var wd *supervisor.WatchdogError
	var ul *supervisor.UsageLimitError
	switch chat.Classify(reply, err) {
	case chat.OutcomeBusy:
		return condition{reason: reasonBusy, within: a.cfg.BusyRetryFor, cause: err}
	case chat.OutcomeModelUnreachable:
		cause := ""
		if errors.As(err, &wd) {
			cause = wd.Cause
		}
		// Each try costs a connection attempt: the supervisor ends a turn at codex's first report
		// of an outage it already knows.
		return condition{reason: reasonModelUnreachable, cause: err,
			notice: chat.ModelUnreachableText(cause) + " It will be answered when the service is back."}
	case chat.OutcomeUsageLimit:
		if a.cfg.Limits == nil || !errors.As(err, &ul) {
			return condition{}
		}
		since := msg.Arrived()
		if ul.ResetsAt.Sub(since) > a.cfg.ParkLimit {
			log.Info("the account's usage limit resets past the park limit; the message is answered with it",
				zap.Time("resets_at", ul.ResetsAt), zap.Duration("park_limit", a.cfg.ParkLimit))
			a.c.parkedTooLong.Add(1)
			return condition{reason: reasonUsageLimit, giveUp: true}
		}
		return condition{reason: reasonUsageLimit, until: ul.ResetsAt, cause: err,
			// Parked messages go oldest first after the reset, each once the one before it
			// reached its turn on its chat's queue (supervisor.AwaitUsable).
			hold:   func(ctx context.Context) error { return a.cfg.Limits.AwaitUsable(ctx, msg.ChatKey, since) },
			notice: chat.UsageLimitParkedText(ul, time.Now())}
	}
	return condition{}
}

// DefaultParkLimit is Config.ParkLimit's default.
const DefaultParkLimit = 24 * time.Hour

// Parker parks work until the account's usage limit resets (*supervisor.Supervisor).
type Parker interface {
	// AwaitUsable blocks until the limit is past and it is the caller's turn (oldest since
	// first); it returns ctx's cause when ctx ends first.
	AwaitUsable(ctx context.Context, chatKey string, since time.Time) error
}
