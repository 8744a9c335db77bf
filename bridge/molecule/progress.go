package molecule

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/chat"
	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// ProgressSource tells what each chat's running turn is doing; *supervisor.Supervisor is one.
type ProgressSource interface {
	Activity() []supervisor.ChatActivity
}

// maxCurrentTask caps the heartbeat's current_task: the canvas shows it on one line.
const maxCurrentTask = 256

// currentTask is the heartbeat's current_task: each running turn as `chat: activity (age)`,
// the longest-running step first, joined with "; ". It is redacted before it is cut: a token
// cut in two would no longer match the redactor.
func currentTask(red redactor, acts []supervisor.ChatActivity, now time.Time) string {
	acts = slices.Clone(acts)
	slices.SortStableFunc(acts, func(a, b supervisor.ChatActivity) int { return a.Since.Compare(b.Since) })
	parts := make([]string, len(acts))
	for i, a := range acts {
		row := supervisor.ChildStatus{Activity: a.What, ActivitySince: a.Since}
		parts[i] = a.ChatKey + ": " + row.ActivityLine(now)
	}
	t := red.String(strings.ToValidUTF8(strings.Join(parts, "; "), "\uFFFD"))
	if len(t) > maxCurrentTask {
		// One line: capText's note would start a second one.
		t = t[:chat.RuneStart(t, maxCurrentTask-len("…"))] + "…"
	}
	return t
}

// relayProgress sends the chat a short note each ProgressInterval while msg's turn runs, until
// ctx ends (its reply is in). A tick while the message still waits in the chat's queue sends
// nothing. A note is tried once: the next one supersedes it.
func (v *turnView) relayProgress(ctx context.Context, log *zap.Logger, msg message, start time.Time) {
	t := time.NewTicker(v.cfg.ProgressInterval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var line string
		for _, a := range v.cfg.Progress.Activity() {
			if a.ChatKey == msg.ChatKey {
				line = supervisor.ChildStatus{Activity: a.What, ActivitySince: a.Since}.ActivityLine(now)
			}
		}
		if line == "" {
			continue
		}
		text := fmt.Sprintf("still working (%s): %s", now.Sub(start).Round(time.Second), line)
		p := ledger.Reply{ActivityID: msg.ActivityID, ChatKey: msg.ChatKey, Route: msg.Route,
			Text: v.red.String(text), MessageID: platform.ReplyID(v.cfg.WorkspaceID, fmt.Sprintf("%s/progress/%d", msg.ActivityID, n))}
		if err := v.out.sendAs(ctx, log, &p, p.MessageID); err != nil && ctx.Err() == nil {
			log.Info("progress note not delivered", zap.Error(err))
		}
	}
}
