package main

import (
	"context"
	"fmt"
	"time"
)

// runLatency is comparison 1: one chat, LatencyMsgs messages in sequence, through `codex exec
// (resume)` per message and through the daemon's local inbox. Wall time is the median per
// message; CPU is the mean per message (exec: the process's rusage; daemon: the growth of the
// daemon's and its codex children's /proc CPU counters, in clock ticks), since CPU readings are
// only meaningful summed. The first message of a chat is reported on its own: it starts the
// thread (exec) or spawns the child (daemon), a once-per-chat cost on the daemon and a
// once-per-thread one on exec; the per-message figures are over the rest.
func (b *bench) runLatency(ctx context.Context) error {
	const name = labelLatency
	mock, err := b.newMock(0)
	if err != nil {
		return err
	}
	defer mock.Close()
	execSide, err := b.ws.newSide("latency-exec", mock)
	if err != nil {
		return err
	}
	daemonSide, err := b.ws.newSide("latency-daemon", mock)
	if err != nil {
		return err
	}
	n := b.cfg.LatencyMsgs
	b.logf("latency: %d messages, one chat, exec vs daemon (alternating)", n)

	var execS, daemonS []sample
	err = b.withDaemon(ctx, daemonSide, 2, func(d *daemon) error {
		ex := &execChat{bin: b.cfg.CodexBin, side: execSide}
		return alternate(n, func(i int) error {
			s, err := ex.send(ctx, fmt.Sprintf("latency message %d", i+1))
			if err != nil {
				return err
			}
			if err := checkHistory(ex.lastReply, i+1); err != nil {
				return fmt.Errorf("exec: %w", err)
			}
			execS = append(execS, s)
			return nil
		}, func(i int) error {
			s, reply, err := b.daemonSample(ctx, d, "canvas:bench-latency", fmt.Sprintf("latency message %d", i+1))
			if err != nil {
				return err
			}
			if err := checkHistory(reply, i+1); err != nil {
				return fmt.Errorf("daemon: %w", err)
			}
			daemonS = append(daemonS, s)
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}

	execFirst, daemonFirst := execS[0], daemonS[0]
	execS, daemonS = execS[1:], daemonS[1:] // parseConfig ensures n ≥ 2
	execWall, daemonWall := median(msAll(walls(execS))), median(msAll(walls(daemonS)))
	execCPU, daemonCPU := mean(msAll(cpus(execS))), mean(msAll(cpus(daemonS)))
	b.addRow(name, fmt.Sprintf("wall ms/msg, median of msgs 2..%d", n), "exec", execWall, "daemon", daemonWall, "exec/daemon", ratio(execWall, daemonWall))
	b.addRow(name, fmt.Sprintf("cpu ms/msg, mean of msgs 2..%d", n), "exec", execCPU, "daemon", daemonCPU, "exec/daemon", ratio(execCPU, daemonCPU))
	b.addRow(name, "first msg wall ms (new thread / spawn)", "exec", ms(execFirst.Wall), "daemon", ms(daemonFirst.Wall), "exec/daemon", ratio(ms(execFirst.Wall), ms(daemonFirst.Wall)))
	b.addRow(name, "first msg cpu ms", "exec", ms(execFirst.CPU), "daemon", ms(daemonFirst.CPU), "exec/daemon", ratio(ms(execFirst.CPU), ms(daemonFirst.CPU)))
	execMS, daemonMS := msAll(walls(execS)), msAll(walls(daemonS))
	b.addNote(name, "spread of wall ms/msg", fmt.Sprintf("exec %s, daemon %s", spread(execMS), spread(daemonMS)))
	b.addNote(name, "target", targetNote(ratio(execWall, daemonWall), targetWarmRatio, "exec/daemon per warm message"))
	b.sum.set("exec_first_msg_ms", ms(execFirst.Wall))
	b.sum.set("warm_first_msg_ms", ms(daemonFirst.Wall))
	b.sum.set("exec_first_msg_cpu_ms", ms(execFirst.CPU))
	b.sum.set("warm_first_msg_cpu_ms", ms(daemonFirst.CPU))
	b.sum.set("latency_ratio_exec_over_warm", ratio(execWall, daemonWall))
	b.sum.set("exec_ms_per_msg", execWall)
	b.sum.set("warm_ms_per_msg", daemonWall)
	b.sum.set("exec_cpu_ms_per_msg", execCPU)
	b.sum.set("warm_cpu_ms_per_msg", daemonCPU)
	b.sum.set("cpu_ratio_exec_over_warm", ratio(execCPU, daemonCPU))
	return nil
}

// targetWarmRatio is the goal for a warm message: this many times faster than `codex exec
// resume`. Reported, never asserted.
const targetWarmRatio = 5

// spread describes a sample's distribution beside its median: the quartiles and the extremes.
func spread(xs []float64) string {
	return fmt.Sprintf("p25 %s / p75 %s (min %s, max %s, n=%d)", fmtFloat(percentile(xs, 25)), fmtFloat(percentile(xs, 75)),
		fmtFloat(percentile(xs, 0)), fmtFloat(percentile(xs, 100)), len(xs))
}

// targetNote is the verdict on a ratio target.
func targetNote(r, target float64, what string) string {
	verdict := "NOT MET"
	if r >= target {
		verdict = "met"
	}
	return fmt.Sprintf("%s: %s %sx, target >= %sx", verdict, what, fmtFloat(r), fmtFloat(target))
}

// daemonSample sends one message through the daemon and measures its wall time and the CPU the
// daemon's process tree used meanwhile; it also returns the reply text. The /proc reads happen
// outside the timed HTTP exchange.
func (b *bench) daemonSample(ctx context.Context, d *daemon, chatKey, text string) (sample, string, error) {
	before, err := d.treeCPU(b.tick)
	if err != nil {
		return sample{}, "", err
	}
	reply, wall, err := d.post(ctx, chatKey, text)
	if err != nil {
		return sample{}, "", err
	}
	after, err := d.treeCPU(b.tick)
	if err != nil {
		return sample{}, "", err
	}
	return sample{Wall: wall, CPU: after - before}, reply.Text, nil
}

func walls(ss []sample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.Wall
	}
	return out
}

func cpus(ss []sample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.CPU
	}
	return out
}
