package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// Bounds of the first-message comparison.
const (
	// spareWaitTimeout bounds the wait for the daemon to replace the spare a sample took: a spawn
	// and handshake take well under a second.
	spareWaitTimeout = 30 * time.Second
	spareWaitEvery   = 25 * time.Millisecond
	usageTimeout     = 10 * time.Second
)

// targetFirstMsgRatio is the goal for the first message of a new chat with spare children: this
// many times faster than `codex exec`. Reported, never asserted.
const targetFirstMsgRatio = 3

// runFirstMessage is comparison 7: the first message of a brand-new chat, from sending it to its
// reply. Three sides take turns, each sample on a new chat: `codex exec` (a new process and
// thread per chat), the daemon with no spare children (spawn, handshake, thread start, turn), and
// the daemon with FirstSpares spare children (a spare with its thread already started: the turn
// alone). Both daemons run throughout; before every sample, of any side, the bench waits until
// the spares daemon has replaced the spare the last sample took, so no sample shares the CPU with
// the replacement of an earlier one (the daemon replaces a spare when a chat takes it, so a first
// message may share it with its own). Each chat of the spares side then gets a second, warm
// message, a spare ready first too: the breakdown (breakdown.go) puts its steps beside the first
// message's.
func (b *bench) runFirstMessage(ctx context.Context) error {
	const name = labelFirstMsg
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	execSide, err := b.ws.newSide("first-exec", mock)
	if err != nil {
		return err
	}
	zeroSide, err := b.ws.newSide("first-daemon-0", mock)
	if err != nil {
		return err
	}
	sparesSide, err := b.ws.newSide("first-daemon-spares", mock)
	if err != nil {
		return err
	}
	flags, err := b.daemonFlags(ctx)
	if err != nil {
		return fmt.Errorf("first message: %w", err)
	}
	zeroCfg, sparesCfg, spares := firstMsgDaemons(b.cfg.FirstSpares, flags["spares"])
	if !flags["spares"] {
		b.addNote(name, "spares", fmt.Sprintf("this daemon has no --spares flag: both daemon sides ran without one (no spares), not with %d", b.cfg.FirstSpares))
	}
	n := b.cfg.FirstSamples
	b.logf("first message: %d new chats per side, exec vs daemon with 0 spares vs with %d (rotating)", n, spares)

	var execMS, zeroMS, sparesMS []float64
	var firstS, warmS []msgSample // the spares side's first messages and their chats' second
	// Every sample leaves a warm chat behind: the cap leaves room for all of them and the spares,
	// so no sample pays for an eviction.
	maxChildren := n + spares + 2
	err = b.withDaemonConfig(ctx, b.daemonConfig(zeroSide, maxChildren, zeroCfg), func(dz *daemon) error {
		return b.withDaemonConfig(ctx, b.daemonConfig(sparesSide, maxChildren, sparesCfg), func(ds *daemon) error {
			ready := func() error { return waitSpares(ctx, ds.status, spares) }
			if err := ready(); err != nil {
				return err
			}
			// post sends message n of a chat, a spare ready first, and records it in out.
			post := func(d *daemon, chat string, n int, out *[]msgSample) (time.Duration, error) {
				if err := ready(); err != nil {
					return 0, err
				}
				start := time.Now()
				reply, wall, err := d.post(ctx, chat, fmt.Sprintf("message %d of %s", n, chat))
				if err != nil {
					return 0, err
				}
				if err := checkHistory(reply.Text, n); err != nil {
					return 0, fmt.Errorf("daemon (%s): %w", chat, err)
				}
				*out = append(*out, msgSample{start: start, wall: wall, turnMS: reply.TurnMS})
				return wall, nil
			}
			daemonSide := func(d *daemon, key string, out *[]float64) func(int) error {
				return func(i int) error {
					chat := fmt.Sprintf("peer:bench-first-%s-%d", key, i)
					var discard []msgSample
					first := &discard
					if d == ds {
						first = &firstS
					}
					wall, err := post(d, chat, 1, first)
					if err != nil {
						return err
					}
					*out = append(*out, ms(wall))
					if d != ds {
						return nil
					}
					// The chat's second message, a warm one, for the breakdown side by side.
					_, err = post(d, chat, 2, &warmS)
					return err
				}
			}
			return rotate(n,
				func(i int) error {
					if err := ready(); err != nil {
						return err
					}
					ex := &execChat{bin: b.cfg.CodexBin, side: execSide}
					s, err := ex.send(ctx, fmt.Sprintf("first message %d", i+1))
					if err != nil {
						return err
					}
					if err := checkHistory(ex.lastReply, 1); err != nil {
						return fmt.Errorf("exec: %w", err)
					}
					execMS = append(execMS, ms(s.Wall))
					return nil
				},
				daemonSide(dz, "zero", &zeroMS),
				daemonSide(ds, "spares", &sparesMS),
			)
		})
	})
	if err != nil {
		return fmt.Errorf("first message: %w", err)
	}

	events, err := mock.Steps()
	if err != nil {
		return fmt.Errorf("first message: %w", err)
	}
	sparesLabel := sparesLabelOf(spares, flags["spares"])
	b.breakdownRows(name, sparesLabel, stepsOfAll(events, firstS), stepsOfAll(events, warmS))
	b.firstMsgReport(sparesLabel, spares, execMS, zeroMS, sparesMS)
	return nil
}

// firstMsgReport adds comparison 7's rows, notes and summary keys.
func (b *bench) firstMsgReport(sparesLabel string, spares int, execMS, zeroMS, sparesMS []float64) {
	const name = labelFirstMsg
	ex, zero, sp := median(execMS), median(zeroMS), median(sparesMS)
	metric := fmt.Sprintf("wall ms, new chat, median of %d", len(sparesMS))
	b.addRow(name, metric, "exec", ex, "daemon(0 spares)", zero, "exec/daemon", ratio(ex, zero))
	b.addRow(name, metric, "exec", ex, sparesLabel, sp, "exec/daemon", ratio(ex, sp))
	b.addRow(name, metric, "daemon(0 spares)", zero, sparesLabel, sp, "0/spares", ratio(zero, sp))
	b.addNote(name, "target", targetNote(ratio(ex, sp), targetFirstMsgRatio, "exec/daemon with spares"))
	b.addNote(name, "spread of wall ms", fmt.Sprintf("exec %s; daemon(0 spares) %s; %s %s", spread(execMS), spread(zeroMS), sparesLabel, spread(sparesMS)))
	b.addNote(name, "p90 wall ms", fmt.Sprintf("exec %s, daemon(0 spares) %s, %s %s",
		fmtFloat(percentile(execMS, 90)), fmtFloat(percentile(zeroMS, 90)), sparesLabel, fmtFloat(percentile(sparesMS, 90))))
	b.sum.set("first_msg_exec_ms", ex)
	b.sum.set("first_msg_daemon_ms", zero)
	b.sum.set("first_msg_spares_ms", sp)
	b.sum.set("first_msg_spares", spares)
	b.sum.set("first_msg_ratio_exec_over_daemon", ratio(ex, zero))
	b.sum.set("first_msg_ratio_exec_over_spares", ratio(ex, sp))
}

// firstMsgDaemons returns the --spares settings of the two daemon sides and the number of spares
// the second one runs with. A daemon without the flag gets no flag on either side, and its only
// behaviour, no spares, is what both measure.
func firstMsgDaemons(spares int, supported bool) (zero, withSpares *int, effective int) {
	if !supported {
		return nil, nil, 0
	}
	return ptr(0), ptr(spares), spares
}

// sparesLabelOf names the daemon side with spares.
func sparesLabelOf(spares int, supported bool) string {
	if !supported {
		return "daemon(no --spares)"
	}
	return fmt.Sprintf("daemon(%d spares)", spares)
}

func ptr[T any](v T) *T { return &v }

// waitSpares waits until the daemon's status shows want spare children alive, polling `supervisor
// status` within spareWaitTimeout. want 0 returns at once.
func waitSpares(ctx context.Context, status harness.StatusClient, want int) error {
	if want == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, spareWaitTimeout)
	defer cancel()
	have := -1
	err := harness.PollUntil(ctx, spareWaitEvery, func(ctx context.Context) (bool, error) {
		doc, err := status.Get(ctx)
		if err != nil {
			return false, err
		}
		have = countSpares(doc.Snapshot)
		return have == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d spare children (status shows %d): %w", want, have, err)
	}
	return nil
}

// countSpares counts the live children of snap that are spares.
func countSpares(snap supervisor.Snapshot) int {
	n := 0
	for _, c := range snap.Children {
		if c.State == supervisor.StateSpare && c.PID > 0 {
			n++
		}
	}
	return n
}

// countChats counts the live children of snap that serve a chat (spares do not).
func countChats(snap supervisor.Snapshot) int {
	n := 0
	for _, c := range snap.Children {
		// A spare being started (or warmed) is not a spare yet, but it has no chat either.
		if c.State != supervisor.StateSpare && c.ChatKey != "" && c.PID > 0 {
			n++
		}
	}
	return n
}

// runFlags returns the flags `supervisor run` accepts, read from its usage text, so that the
// bench drives a daemon built before a flag was added as well as one built after.
func runFlags(ctx context.Context, bin string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "run", "-h")
	cmd.Stdout, cmd.Stderr = &out, &out
	// -h exits non-zero by the flag package's convention; only the text matters.
	_ = cmd.Run()
	flags := usageFlags(out.String())
	if len(flags) == 0 {
		return nil, fmt.Errorf("%s run -h: no flags in its usage text: %s", bin, truncate(out.String(), 300))
	}
	return flags, nil
}

// usageFlags parses the flag names out of a Go flag package usage text, whose flag lines read
// "  -name type" or "  -name".
func usageFlags(usage string) map[string]bool {
	flags := make(map[string]bool)
	for line := range strings.Lines(usage) {
		rest, ok := strings.CutPrefix(line, "  -")
		if !ok || rest == "" || rest[0] == ' ' || rest[0] == '\t' {
			continue
		}
		if f := strings.Fields(rest); len(f) > 0 {
			flags[f[0]] = true
		}
	}
	return flags
}

// rotate runs n rounds of sides, each round starting one side later than the last (A B C, B C A,
// C A B, …), so that load drift and order effects hit every side alike. It stops at the first
// error.
func rotate(n int, sides ...func(i int) error) error {
	for i := range n {
		for j := range sides {
			if err := sides[(i+j)%len(sides)](i); err != nil {
				return err
			}
		}
	}
	return nil
}
