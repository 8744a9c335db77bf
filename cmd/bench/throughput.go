package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// runThroughput is comparison 3: TPChats chats × TPMsgs messages with a mock model that takes
// TPLatency per response. The exec side runs every message one at a time for the whole workspace
// (as the Python daemon does); the daemon side runs all chats at once, each chat's messages in
// order. The messages are split into TPRounds rounds that alternate between the sides; both keep
// their chats across rounds, so the first round pays thread creation (exec) and child spawn
// (daemon) on both.
func (b *bench) runThroughput(ctx context.Context) error {
	const name = labelThroughput
	mock, err := b.newMock(b.cfg.TPLatency)
	if err != nil {
		return err
	}
	defer mock.Close()
	execSide, err := b.ws.newSide("throughput-exec", mock)
	if err != nil {
		return err
	}
	daemonSide, err := b.ws.newSide("throughput-daemon", mock)
	if err != nil {
		return err
	}
	chats, msgs, rounds := b.cfg.TPChats, b.cfg.TPMsgs, b.cfg.TPRounds
	b.logf("throughput: %d chats × %d messages, model latency %s, %d alternating rounds", chats, msgs, b.cfg.TPLatency, rounds)

	execChats := make([]*execChat, chats)
	for i := range execChats {
		execChats[i] = &execChat{bin: b.cfg.CodexBin, side: execSide}
	}
	var execWall, execCPU, daemonWall, daemonCPU time.Duration
	var execN, daemonN int
	err = b.withDaemon(ctx, daemonSide, max(16, chats), func(d *daemon) error {
		return alternate(rounds, func(r int) error {
			per := roundSize(msgs, rounds, r)
			start := time.Now()
			for m := range per {
				for c, ec := range execChats {
					s, err := ec.send(ctx, fmt.Sprintf("throughput chat %d message %d", c, roundStart(msgs, rounds, r)+m+1))
					if err != nil {
						return err
					}
					execCPU += s.CPU
					execN++
				}
			}
			execWall += time.Since(start)
			return nil
		}, func(r int) error {
			per := roundSize(msgs, rounds, r)
			first := roundStart(msgs, rounds, r)
			wall, cpu, err := b.daemonRound(ctx, d, chats, first, per)
			if err != nil {
				return err
			}
			daemonWall += wall
			daemonCPU += cpu
			daemonN += chats * per
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}

	execRate := float64(execN) / execWall.Seconds()
	daemonRate := float64(daemonN) / daemonWall.Seconds()
	execCPUPer := execCPU.Seconds() / float64(execN)
	daemonCPUPer := daemonCPU.Seconds() / float64(daemonN)
	b.addRow(name, fmt.Sprintf("msgs/s (%d msgs, %s model latency)", execN, b.cfg.TPLatency),
		"exec", execRate, "daemon", daemonRate, "daemon/exec", ratio(daemonRate, execRate))
	b.addRow(name, "cpu s/msg", "exec", execCPUPer, "daemon", daemonCPUPer, "exec/daemon", ratio(execCPUPer, daemonCPUPer))
	b.sum.set("throughput_ratio", ratio(daemonRate, execRate))
	b.sum.set("exec_msgs_per_sec", execRate)
	b.sum.set("daemon_msgs_per_sec", daemonRate)
	b.sum.set("exec_cpu_s_per_msg", execCPUPer)
	b.sum.set("daemon_cpu_s_per_msg", daemonCPUPer)
	return nil
}

// daemonRound sends per messages to each of chats chats at once, each chat's in order, and
// returns the round's wall time and the CPU the daemon's process tree used in it.
func (b *bench) daemonRound(ctx context.Context, d *daemon, chats, first, per int) (time.Duration, time.Duration, error) {
	cpuBefore, err := d.treeCPU(b.tick)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range chats {
		wg.Go(func() {
			key := fmt.Sprintf("peer:bench-%d", c)
			for m := range per {
				if _, _, err := d.post(ctx, key, fmt.Sprintf("throughput chat %d message %d", c, first+m+1)); err != nil {
					cancel(err) // the round is void; stop the other chats
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return 0, 0, err
	}
	cpuAfter, err := d.treeCPU(b.tick)
	if err != nil {
		return 0, 0, err
	}
	return wall, cpuAfter - cpuBefore, nil
}

// roundSize is how many of msgs messages per chat round r of rounds gets: as even as possible,
// the earlier rounds taking the remainder.
func roundSize(msgs, rounds, r int) int {
	n := msgs / rounds
	if r < msgs%rounds {
		n++
	}
	return n
}

// roundStart is the number of messages per chat sent before round r.
func roundStart(msgs, rounds, r int) int {
	s := 0
	for i := range r {
		s += roundSize(msgs, rounds, i)
	}
	return s
}
