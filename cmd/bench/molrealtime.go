package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// Settings of the Molecule real-time comparison: production's intervals, not the suite's.
const (
	// mrtPollInterval is --poll-interval on both sides (the daemon's default, as Molecule's
	// runtime polls); mrtSafetyPoll the stream side's --safety-poll-interval (its default).
	mrtPollInterval = 5 * time.Second
	mrtSafetyPoll   = 30 * time.Second
	// mrtMsgTimeout bounds the wait for one reply: a poll interval and a turn, many times over.
	mrtMsgTimeout = time.Minute
)

// mrtRun is one side of the comparison.
type mrtRun struct {
	latencies []float64 // ms, message written → reply delivered
	idleRPM   float64   // requests per idle minute, heartbeats and /state not counted
	polls     int       // activity polls while messages were answered
	// perMsg is requests per message while answering, less the idle baseline (heartbeats and
	// /state not counted), including the ack that follows the last reply.
	perMsg float64
}

// runMolRealtime is comparison 8b: how long a canvas message written at a random moment waits
// for its reply on Molecule, with the workspace's event stream (the daemon's default) and with
// polling every 5 s only (--event-stream=false), and what each costs in requests while idle. A
// mock model answering at once: what is measured is the road to the warm child. The platform is
// the fake one with the real rate window (a minute), serving the stream as the real one does.
func (b *bench) runMolRealtime(ctx context.Context) error {
	const name = labelMolRealtime
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	msgs, idle := b.cfg.MrtMsgs, b.cfg.MrtIdle
	b.logf("molecule real-time: %d canvas messages at random moments and %s idle, with the event stream, then polling every %s only",
		msgs, idle, mrtPollInterval)
	var runs [2]mrtRun
	for i, stream := range []bool{true, false} {
		s, err := b.ws.newSide(fmt.Sprintf("molrt-%v", stream), mock)
		if err != nil {
			return err
		}
		if runs[i], err = b.mrtSide(ctx, s, stream, msgs, idle); err != nil {
			return fmt.Errorf("molecule real-time (stream %v): %w", stream, err)
		}
	}
	st, poll := runs[0], runs[1]
	stMed, pollMed := median(st.latencies), median(poll.latencies)
	stP95, pollP95 := percentile(st.latencies, 95), percentile(poll.latencies, 95)
	b.addRow(name, fmt.Sprintf("message to reply, median ms (%d messages)", msgs), "poll 5s", pollMed, "stream", stMed, "poll/stream", ratio(pollMed, stMed))
	b.addRow(name, "message to reply, p95 ms", "poll 5s", pollP95, "stream", stP95, "poll/stream", ratio(pollP95, stP95))
	b.addRow(name, fmt.Sprintf("requests per idle minute (%s idle, heartbeats and /state not counted)", idle),
		"poll 5s", poll.idleRPM, "stream", st.idleRPM, "stream/poll", ratio(st.idleRPM, poll.idleRPM))
	b.addRow(name, "requests per message (less the idle baseline; heartbeats and /state not counted)",
		"poll 5s", poll.perMsg, "stream", st.perMsg, "stream/poll", ratio(st.perMsg, poll.perMsg))
	b.addNote(name, "polls while answering", fmt.Sprintf("stream side %d, poll side %d", st.polls, poll.polls))
	b.sum.set("molecule_stream_median_ms", stMed)
	b.sum.set("molecule_stream_p95_ms", stP95)
	b.sum.set("molecule_poll_median_ms", pollMed)
	b.sum.set("molecule_poll_p95_ms", pollP95)
	b.sum.set("molecule_stream_idle_rpm", st.idleRPM)
	b.sum.set("molecule_poll_idle_rpm", poll.idleRPM)
	b.sum.set("molecule_stream_requests_per_message", st.perMsg)
	return nil
}

// mrtSide runs one side: a daemon on a fresh fake platform, an idle window counted from the
// platform's request log, then msgs canvas messages, each written at a random moment within a
// poll interval after the last reply.
func (b *bench) mrtSide(ctx context.Context, s side, stream bool, msgs int, idle time.Duration) (mrtRun, error) {
	plat := moleculetest.New(moleculetest.Config{WorkspaceID: molWorkspace, EchoNotifies: true, AckEnabled: true, Seed: 1})
	defer plat.Close()
	cfg := b.daemonConfig(s, 2, nil)
	cfg.Platform = plat
	cfg.PollInterval = mrtPollInterval
	if stream {
		cfg.Extra = []string{"--safety-poll-interval", mrtSafetyPoll.String()}
	} else {
		cfg.Extra = []string{"--event-stream=false"}
	}
	var run mrtRun
	err := b.withDaemonConfig(ctx, cfg, func(d *daemon) error {
		pctx, cancel := context.WithTimeout(ctx, molFirstPollTimeout)
		defer cancel()
		if err := plat.WaitFor(pctx, func() bool { return plat.CountCalls(moleculetest.RouteActivity, 200) > 0 }); err != nil {
			return fmt.Errorf("daemon never polled the platform: %w; output tail:\n%s", err, d.stderr.String())
		}
		// A warm child first: the first message of a chat starts one, which is not what is
		// measured here.
		if _, err := mrtMessage(ctx, plat, "warm up", 1); err != nil {
			return err
		}
		from := len(plat.Calls())
		if !sleepCtx(ctx, idle) {
			return ctx.Err()
		}
		run.idleRPM = float64(mrtCounted(plat, from)) / idle.Minutes()
		polls := plat.CountCalls(moleculetest.RouteActivity, 0)
		from, began := len(plat.Calls()), time.Now()
		rng := rand.New(rand.NewPCG(2, 3))
		for i := range msgs {
			// A random moment: anywhere in the poll's cycle.
			if !sleepCtx(ctx, time.Duration(rng.Int64N(int64(mrtPollInterval)))) {
				return ctx.Err()
			}
			lat, err := mrtMessage(ctx, plat, fmt.Sprintf("real-time %d", i+1), i+2)
			if err != nil {
				return err
			}
			run.latencies = append(run.latencies, ms(lat))
		}
		run.polls = plat.CountCalls(moleculetest.RouteActivity, 0) - polls
		// The ack goes out once the daemon has been idle for a poll interval.
		if !sleepCtx(ctx, mrtPollInterval+time.Second) {
			return ctx.Err()
		}
		baseline := run.idleRPM * time.Since(began).Minutes()
		run.perMsg = (float64(mrtCounted(plat, from)) - baseline) / float64(msgs)
		return nil
	})
	return run, err
}

// mrtCounted counts the platform's calls from index from on, heartbeats and /state left out.
func mrtCounted(plat *moleculetest.Platform, from int) int {
	n := 0
	for _, c := range plat.Calls()[from:] {
		if c.Route != moleculetest.RouteHeartbeat && c.Route != moleculetest.RouteState {
			n++
		}
	}
	return n
}

// mrtMessage writes one canvas message and waits for the want-th reply, returning how long it
// took from the write.
func mrtMessage(ctx context.Context, plat *moleculetest.Platform, text string, want int) (time.Duration, error) {
	start := time.Now()
	// As the canvas sends it: with a messageId, which the platform's events name it by.
	plat.Enqueue(moleculetest.CanvasMessage(text).WithMessageID(fmt.Sprintf("bench-msg-%d", want)))
	wctx, cancel := context.WithTimeout(ctx, mrtMsgTimeout)
	defer cancel()
	if err := plat.WaitFor(wctx, func() bool { return len(plat.Notifies()) >= want }); err != nil {
		return 0, fmt.Errorf("no reply to %q: %w", text, err)
	}
	return time.Since(start), nil
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
