package molecule

// Tool chips: the canvas shows each completed tool call of a chat's turn as a chip and as the
// live progress line, from one agent_log row per call, the way Molecule's own runtime posts them
// (runtime tool_trace.py emit_tool_call; docs/molecule.md "Tool chips"). Only a canvas chat's
// turns send them; a peer gets none. They are optional traffic: coalesced to at most one row a
// second per chat, and dropped first when the platform's rate budget runs low (rateGate).

import (
	"context"
	"strconv"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/supervisor"
)

const (
	// chipEvery is the least time between two chips of one chat: a burst of tool calls becomes
	// one row a second, the latest call, naming how many it stands for.
	chipEvery = time.Second
	// maxChipSummary is the summary's length in characters (runes), as the canvas shows it.
	maxChipSummary = 120
	// chipTimeout bounds one agent_log post, as the runtime's (5 s).
	chipTimeout = 5 * time.Second
	// chipQueue bounds the calls of one turn waiting to be posted: the codex reader never waits.
	chipQueue = 64
)

// chips carries one message's tool calls from the codex child's reader to relayChips.
type chips struct {
	ch chan supervisor.TurnProgress
}

// relayChips posts q's tool calls, at most one a chipEvery, until ctx ends; what is held back
// then goes as the last chip.
func (v *turnView) relayChips(ctx context.Context, log *zap.Logger, chatKey string, q *chips) {
	var (
		held  *supervisor.TurnProgress
		more  int // calls the held one stands for beyond itself
		timer *time.Timer
		fire  <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	send := func(p supervisor.TurnProgress, n int) {
		v.postChip(log, chatKey, p, n)
		held, more = nil, 0
	}
	hold := func(p supervisor.TurnProgress) {
		if held != nil {
			more++
			v.c.chipsCoalesced.Add(1)
		}
		held = &p
	}
	for {
		select {
		case <-ctx.Done():
			// The turn is over: what it reported and was not posted yet goes as one last chip.
			for {
				select {
				case p := <-q.ch:
					hold(p)
					continue
				default:
				}
				break
			}
			if held != nil {
				send(*held, more)
			}
			return
		case p := <-q.ch:
			hold(p)
			if wait := v.chipWait(chatKey); wait > 0 {
				if fire == nil {
					timer = time.NewTimer(wait)
					fire = timer.C
				}
				continue
			}
			send(p, more)
		case <-fire:
			fire = nil
			if held != nil {
				send(*held, more)
			}
		}
	}
}

// chipWait is how long chatKey's next chip must wait (0: it may go now).
func (v *turnView) chipWait(chatKey string) time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return max(time.Until(v.chipLast[chatKey].Add(chipEvery)), 0)
}

// postChip posts one agent_log row for p (standing for more calls besides), unless the budget
// is low.
func (v *turnView) postChip(log *zap.Logger, chatKey string, p supervisor.TurnProgress, more int) {
	now := time.Now()
	v.mu.Lock()
	v.chipLast[chatKey] = now
	v.mu.Unlock()
	if !v.client.Optional(now) {
		v.c.chipsDropped.Add(1)
		return
	}
	status := "ok"
	if p.Failed {
		status = "error"
	}
	summary := chipSummary(v.red, p, more)
	ctx, cancel := context.WithTimeout(context.Background(), chipTimeout)
	defer cancel()
	if err := v.client.AgentLog(ctx, chipTimeout, p.Tool, summary, status); err != nil {
		v.c.chipsFailed.Add(1)
		log.Debug("tool chip not posted", zap.Error(err))
		return
	}
	v.c.chipsSent.Add(1)
}

// chipSummary is "🛠 name(argument)" as the runtime writes it, with " +N" for the calls it
// stands for, redacted with the daemon's whole secret set before it is cut (a cut token would
// no longer match) and cut to maxChipSummary characters.
func chipSummary(red redactor, p supervisor.TurnProgress, more int) string {
	s := red.String("🛠 " + p.Tool + "(" + p.ToolArg + ")")
	suffix := ""
	if more > 0 {
		suffix = " +" + strconv.Itoa(more)
	}
	if n := maxChipSummary - utf8.RuneCountInString(suffix); utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n-1]) + "…"
	}
	return s + suffix
}
