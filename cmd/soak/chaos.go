package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// runChaos applies the schedule, relative to start, until it is done or ctx ends. It owns the
// daemon processes while it runs. An error means a daemon could not be restarted: the soak
// cannot go on.
func (h *rig) runChaos(ctx context.Context, start time.Time, evs []event, rng *rand.Rand) error {
	for _, e := range evs {
		timer := time.NewTimer(time.Until(start.Add(e.At)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		if err := h.checkDaemon(ctx); err != nil {
			return err
		}
		reapOrphans()
		switch e.Kind {
		case evDaemonKill:
			if e.OnReply {
				h.awaitReply(ctx)
			}
			if err := h.killDaemon(ctx); err != nil {
				return err
			}
		case evChildKill:
			h.killChild(ctx, rng)
		case evFlakyStart:
			// Polls and replies; register and heartbeat stay healthy (a daemon that cannot
			// register only retries, which the restarts already exercise).
			h.plat.SetChaos(h.cfg.PlatformFailRate, http.StatusBadGateway,
				moleculetest.RouteActivity, moleculetest.RouteNotify, moleculetest.RouteA2A)
			h.logf("platform flaky: %.0f%% of polls and replies answer 502", 100*h.cfg.PlatformFailRate)
		case evFlakyStop:
			h.plat.SetChaos(0, 0)
			h.logf("platform healthy")
		case evPlatformHang:
			h.plat.HangNext(e.Route, 1)
			h.logf("platform: the next %s call hangs", e.Route)
		case evCursorGone:
			h.plat.GoneNext()
			h.logf("platform: the next poll answers 410 Gone")
		}
	}
	return nil
}

// replyWait bounds how long an on-reply daemon kill waits for a reply before it kills anyway.
const replyWait = 5 * time.Second

// awaitReply returns as soon as the platform accepted one more reply (it wakes on the platform's
// record of the call, before the daemon has read the answer), or after replyWait.
func (h *rig) awaitReply(ctx context.Context) {
	n := h.plat.Deliveries()
	wctx, cancel := context.WithTimeout(ctx, replyWait)
	defer cancel()
	if err := h.plat.WaitFor(wctx, func() bool { return h.plat.Deliveries() > n }); err != nil {
		h.logf("no reply within %s; killing the daemon anyway", replyWait)
	}
}

// busyWait is how long a child kill looks for a busy child before it settles for an idle one;
// anyWait how long it looks for any child at all.
const (
	busyWait = 3 * time.Second
	anyWait  = 10 * time.Second
)

// killChild SIGKILLs one codex child of the daemon: a busy one if one turns up within busyWait
// (its turn dies with it, which must still end in a visible reply), else an idle one.
func (h *rig) killChild(ctx context.Context, rng *rand.Rand) {
	var busy, all []supervisor.ChildStatus
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, anyWait)
	defer cancel()
	_ = harness.PollUntil(wctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		doc, err := h.status.Get(ctx)
		if err != nil {
			return false, err
		}
		busy, all = busy[:0], all[:0]
		for _, c := range doc.Snapshot.Children {
			if c.PID <= 0 {
				continue
			}
			all = append(all, c)
			if c.State == supervisor.StateBusy {
				busy = append(busy, c)
			}
		}
		return len(busy) > 0 || (len(all) > 0 && time.Since(start) >= busyWait), nil
	})
	pick := busy
	if len(pick) == 0 {
		pick = all
	}
	if len(pick) == 0 {
		h.logf("child kill skipped: no live codex child")
		return
	}
	c := pick[rng.IntN(len(pick))]
	// The status may be a moment old: only a process that still is our codex gets the signal.
	if !h.match.isOurCodex(c.PID) {
		h.logf("child kill skipped: pid %d is gone", c.PID)
		return
	}
	if err := syscall.Kill(c.PID, syscall.SIGKILL); err != nil {
		h.logf("child kill of pid %d failed: %v", c.PID, err)
		return
	}
	h.childKills++
	h.logf("child kill #%d: %s pid %d (%s)", h.childKills, c.ChatKey, c.PID, c.State)
}
