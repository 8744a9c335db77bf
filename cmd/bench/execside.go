package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

// execTurnTimeout bounds one `codex exec` run; a healthy one takes well under a second.
const execTurnTimeout = 2 * time.Minute

// execChat is one conversation run the way the replaced Python daemon runs it: a `codex exec`
// process per message, `codex exec resume <thread>` after the first.
type execChat struct {
	bin       string
	side      side
	threadID  string
	lastReply string
}

// sample is one measured message.
type sample struct {
	Wall time.Duration
	CPU  time.Duration
}

// send runs one message and measures it. CPU is the exec process's own usage (and that of
// anything it waited for), read as the growth of this process's RUSAGE_CHILDREN across the run:
// ExecTurn reaps the child before returning. The caller must not reap any other child meanwhile,
// which the sequential structure of the bench guarantees.
func (c *execChat) send(ctx context.Context, prompt string) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, execTurnTimeout)
	defer cancel()
	before, err := childrenCPU()
	if err != nil {
		return sample{}, err
	}
	res, err := appservertest.ExecTurn(ctx, c.bin, c.side.codexHome, c.side.cwd, c.threadID, prompt)
	after, cpuErr := childrenCPU()
	if err != nil {
		return sample{}, fmt.Errorf("exec (%s): %w", c.side.name, err)
	}
	if cpuErr != nil {
		return sample{}, cpuErr
	}
	if err := checkReply(res.Reply, prompt); err != nil {
		return sample{}, fmt.Errorf("exec (%s): %w", c.side.name, err)
	}
	c.lastReply = res.Reply
	if c.threadID == "" {
		if res.ThreadID == "" {
			return sample{}, fmt.Errorf("exec (%s): no thread id in codex exec output", c.side.name)
		}
		c.threadID = res.ThreadID
	}
	return sample{Wall: res.Duration, CPU: after - before}, nil
}

// childrenCPU is the user+system time of this process's reaped children so far.
func childrenCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, fmt.Errorf("getrusage children: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// replyTurn returns n from the mock model's default reply "reply #<n>: <text>": the number of
// user messages the model was sent, i.e. how much of the conversation codex replayed to it.
func replyTurn(reply string) (int, error) {
	rest, ok := strings.CutPrefix(reply, "reply #")
	if !ok {
		return 0, fmt.Errorf("reply %q is not the mock model's default reply", truncate(reply, 80))
	}
	num, _, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, fmt.Errorf("reply %q is not the mock model's default reply", truncate(reply, 80))
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, fmt.Errorf("reply %q: turn number: %w", truncate(reply, 80), err)
	}
	return n, nil
}

// checkHistory verifies that the model saw want user messages in the turn that produced reply:
// the thread kept its whole history.
func checkHistory(reply string, want int) error {
	n, err := replyTurn(reply)
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("the model saw %d user messages, want %d: history was not kept", n, want)
	}
	return nil
}

// checkReply verifies that a reply answers prompt: the mock model's default reply quotes the last
// user message, so a reply without it means the bench measured the wrong thing (another chat's
// turn, an error text).
func checkReply(reply, prompt string) error {
	if !strings.Contains(reply, prompt) {
		return fmt.Errorf("reply %q does not answer %q", truncate(reply, 120), prompt)
	}
	return nil
}
