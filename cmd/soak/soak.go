package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
)

// outcome is everything the verdict is computed from.
type outcome struct {
	cfg      Config
	msgs     []Message
	acct     *Accounting
	log      callLog
	kills    []Kill
	ackViol  []AckViolation
	unfinish []Message
	pending  int // replies still pending in the final state
	// threadChanges and missingSessions are from the sessions.json snapshots.
	threadChanges   []string
	missingSessions []string
	base, end       Sample
	baseOK, endOK   bool
	lastDaemonMsgs  int64 // messages the last daemon received: the load behind the end sample
	leftovers       []proc
	daemonStarts    int
	childKills      int
	unexpected      []string
	termErr         error
	termTook        time.Duration
	modelHangs      int
	modelFails      int
	// fatal is an error that stopped the soak before its checks could all run.
	fatal   error
	elapsed time.Duration
}

// rngs are the harness's independent random streams, all from the seed, so that adding draws to
// one (a longer schedule) does not change another (the injection order).
type rngs struct{ schedule, inject, victims *rand.Rand }

func newRNGs(seed uint64) rngs {
	return rngs{
		schedule: rand.New(rand.NewPCG(seed, 1)),
		inject:   rand.New(rand.NewPCG(seed, 2)),
		victims:  rand.New(rand.NewPCG(seed, 3)),
	}
}

// soak runs the phases: start, warm-up and baseline, chaos with paced injection, settle, end
// sample, SIGTERM, final state. It fills o as it goes, so a failure half-way still reports what
// was seen; the returned error is that failure.
func (h *rig) soak(ctx context.Context, o *outcome) error {
	cfg := h.cfg
	r := newRNGs(cfg.Seed)
	evs := plan(planConfig{Duration: cfg.Duration, DaemonKills: cfg.DaemonKills, ChildKills: cfg.ChildKills,
		PlatformHangs: cfg.PlatformHangs, CursorGone: cfg.CursorGone, FlakyEpisodes: cfg.FlakyEpisodes}, r.schedule)
	h.logf("schedule (%d events):", len(evs))
	for _, e := range evs {
		fmt.Fprintf(h.out, "           %s\n", e)
	}

	if err := h.startDaemon(ctx); err != nil {
		return err
	}
	if err := h.warmUp(ctx, o); err != nil {
		return err
	}

	h.logf("chaos phase: %d chats × %d messages over %s", cfg.Chats, cfg.Messages, cfg.Duration)
	h.faults.armed.Store(true)
	chaosErr := h.chaosPhase(ctx, evs, r)
	h.faults.armed.Store(false)
	h.plat.ClearFailures()
	o.modelHangs, o.modelFails = h.faults.counts()
	h.logf("chaos stopped: platform healthy, model healthy; %d messages injected", len(h.messages()))
	if chaosErr != nil {
		return chaosErr
	}

	if err := h.settle(ctx); err != nil {
		return err
	}
	if err := h.endSample(ctx, o); err != nil {
		return err
	}
	return h.stop(ctx, o)
}

// warmUp answers one message on a chat of its own, waits until the daemon is idle with no
// child left, and takes the baseline there: the daemon has done its one-time set-up (HTTP
// client, codex spawn path) and holds nothing per message.
func (h *rig) warmUp(ctx context.Context, o *outcome) error {
	h.enqueue(peerChat("w0"))
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second+h.cfg.IdleTTL)
	defer cancel()
	if err := h.plat.WaitFor(wctx, func() bool { return h.plat.Deliveries() >= 1 }); err != nil {
		return fmt.Errorf("warm-up message not answered: %w", err)
	}
	var doc harness.StatusDoc
	err := harness.PollUntil(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var err error
		doc, err = h.status.Get(ctx)
		return err == nil && idle(doc, true, h.cfg.Spares), err
	})
	if err != nil {
		return fmt.Errorf("daemon not idle after warm-up: %w", err)
	}
	o.base, o.baseOK = sample(doc), true
	h.logf("baseline (idle, no chat children, spares ready): goroutines %d, heap %s, rss %s",
		o.base.Goroutines, mib(int64(o.base.HeapBytes)), mib(o.base.RSSBytes))
	return nil
}

// chaosPhase runs the injector and the chaos schedule side by side and waits for both.
func (h *rig) chaosPhase(ctx context.Context, evs []event, r rngs) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	order := injectionOrder(chatsFor(h.cfg.Chats, h.cfg.Canvas), h.cfg.Messages, r.inject)
	start := time.Now()
	var wg sync.WaitGroup
	var chaosErr error
	wg.Go(func() { h.inject(ctx, order, h.cfg.Duration) })
	wg.Go(func() {
		chaosErr = h.runChaos(ctx, start, evs, r.victims)
		if chaosErr != nil {
			cancel() // the injector has no daemon to feed
		}
	})
	wg.Wait()
	if chaosErr != nil {
		return chaosErr
	}
	return ctx.Err()
}

// settle waits until every message has a reply and the daemon has nothing in flight.
func (h *rig) settle(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, h.cfg.SettleTimeout)
	defer cancel()
	began := time.Now()
	lost := -1
	err := harness.PollUntil(sctx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := h.checkDaemon(ctx); err != nil {
			return false, err
		}
		a, _, _ := h.account()
		if lost = len(a.Lost()); lost > 0 {
			return false, nil
		}
		doc, err := h.status.Get(ctx)
		return err == nil && idle(doc, false, h.cfg.Spares), err
	})
	if err != nil {
		// Not fatal: the checks report what is missing.
		h.logf("not settled within %s: %d messages without a reply: %v", h.cfg.SettleTimeout, lost, err)
		return nil
	}
	h.logf("settled in %s: every message has a reply, nothing in flight", time.Since(began).Round(time.Millisecond))
	return nil
}

// endSample waits until the idle children have closed and takes the end sample, giving the
// daemon a bounded while to get back within the tolerance (a GC cycle, idle connections).
func (h *rig) endSample(ctx context.Context, o *outcome) error {
	ectx, cancel := context.WithTimeout(ctx, h.cfg.IdleTTL+20*time.Second)
	defer cancel()
	tol := defaultTolerance()
	var doc harness.StatusDoc
	var got bool
	err := harness.PollUntil(ectx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		d, err := h.status.Get(ctx)
		if err != nil {
			return false, err
		}
		doc, got = d, true
		ok, _ := tol.Within(o.base, sample(d))
		return idle(d, true, h.cfg.Spares) && ok, nil
	})
	if !got {
		return fmt.Errorf("no end sample: %w", err)
	}
	o.end, o.endOK = sample(doc), err == nil
	if doc.Bridge != nil {
		o.lastDaemonMsgs = doc.Bridge.Received
	}
	h.logf("end sample: goroutines %d, heap %s, rss %s, live children %d",
		o.end.Goroutines, mib(int64(o.end.HeapBytes)), mib(o.end.RSSBytes), doc.Snapshot.Totals.Live)
	return nil
}

// stop sends SIGTERM to the last daemon and checks that it exits in time and leaves no codex.
func (h *rig) stop(ctx context.Context, o *outcome) error {
	d := h.current()
	o.termTook, o.termErr = d.Terminate(ctx, h.cfg.DrainTimeout+15*time.Second)
	if d.Alive() {
		_ = d.Kill(ctx)
		o.termErr = fmt.Errorf("daemon did not exit within %s of SIGTERM; killed", h.cfg.DrainTimeout+15*time.Second)
	}
	h.logf("daemon #%d stopped by SIGTERM in %s: %v", d.n, o.termTook.Round(time.Millisecond), errOrOK(o.termErr))
	left, err := h.match.scan()
	if err != nil {
		return err
	}
	o.leftovers = left
	return nil
}

func errOrOK(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// account correlates what the platform accepted so far with the injected messages.
func (h *rig) account() (*Accounting, callLog, []Kill) {
	calls := h.plat.Calls()
	l := readCalls(calls, workspaceID)
	kills := h.boundaries(calls)
	return Correlate(h.messages(), l.Replies, kills), l, kills
}

// finish computes the accounting and the acknowledgement checks once every daemon is gone.
func (h *rig) finish(o *outcome) {
	a, l, kills := h.account()
	o.msgs, o.acct, o.log, o.kills = h.messages(), a, l, kills
	o.daemonStarts, o.childKills, o.unexpected = len(h.daemons), h.childKills, h.unexpected
	var snaps []map[string]string
	for _, k := range kills {
		snaps = append(snaps, k.Sessions)
	}
	final, errState := readBridgeState(h.stateDir)
	sess, errSess := readSessions(h.stateDir)
	if err := errors.Join(errState, errSess); err != nil {
		o.fatal = errors.Join(o.fatal, err)
		return
	}
	snaps = append(snaps, sess)
	stopped := o.fatal == nil
	var finalState *BridgeState
	if stopped {
		// Only a daemon stopped cleanly is expected to have finished everything.
		finalState = &final
		o.unfinish, o.pending = Unfinished(a, final)
	}
	o.ackViol = AckViolations(a, l.Acks, kills, finalState, len(h.plat.Calls()))
	o.threadChanges = ThreadChanges(snaps)
	o.missingSessions = MissingSessions(a.Answers, sess)
}
