package appserver

import (
	"encoding/json"
	"time"

	"github.com/molecule-ai/codex-warm/protocol"
)

// RateLimits decodes an account/rateLimits/updated notification. Missing or null fields stay
// nil: the update is sparse, and a malformed one is reported as not ok rather than guessed at.
func RateLimits(n protocol.Notification) (protocol.RateLimitSnapshot, bool) {
	if n.Method != protocol.NotifyRateLimitsUpdated {
		return protocol.RateLimitSnapshot{}, false
	}
	var rl protocol.RateLimitsNotification
	if json.Unmarshal(n.Params, &rl) != nil {
		return protocol.RateLimitSnapshot{}, false
	}
	return rl.RateLimits, true
}

// UsageLimit is the one place that decides whether a turn failed because the account's usage
// limit is reached: a final error (willRetry false) or a turn/completed error of kind
// usageLimitExceeded. resetsAt is when the limit resets, from the rate limits codex reported
// during the turn: the reset of the window at or nearest its limit (the highest usedPercent;
// among equals, the latest reset), since that is the limit that was hit. A window far from its
// limit never decides: a 5-hour window at 99 % resetting in 40 s beside a weekly one at 20 %
// resetting in 6 days is a 40-second wait, not 6 days. Zero when codex reported no reset.
//
// Wire facts (codex 0.169, docs/PROTOCOL.md): on a 429 usage_limit_reached codex sends
// account/rateLimits/updated from the answer's x-codex-* headers, then an error notification
// with codexErrorInfo "usageLimitExceeded" and willRetry false, then turn/completed failed with
// the same error. The reset time is in the message only as text ("try again at 3:39 PM.").
func UsageLimit(notifs []protocol.Notification) (resetsAt time.Time, ok bool) {
	best := -1.0
	for _, n := range notifs {
		if rl, isRL := RateLimits(n); isRL {
			for _, w := range []*protocol.RateLimitWindow{rl.Primary, rl.Secondary} {
				if w == nil || w.ResetsAt == nil || *w.ResetsAt <= 0 {
					continue
				}
				at := time.Unix(*w.ResetsAt, 0)
				if used := min(w.UsedPercent, 100); used > best || used == best && at.After(resetsAt) {
					best, resetsAt = used, at
				}
			}
			continue
		}
		if limitError(n) {
			ok = true
		}
	}
	if !ok {
		return time.Time{}, false
	}
	return resetsAt, true
}

// limitError reports an error notification or a failed turn/completed of kind
// usageLimitExceeded.
func limitError(n protocol.Notification) bool {
	var e *protocol.TurnError
	switch n.Method {
	case protocol.NotifyError:
		var en protocol.ErrorNotification
		if json.Unmarshal(n.Params, &en) != nil || en.WillRetry {
			return false
		}
		e = &en.Error
	case protocol.NotifyTurnCompleted:
		var tn protocol.TurnNotification
		if json.Unmarshal(n.Params, &tn) != nil || tn.Turn.Status != protocol.TurnFailed {
			return false
		}
		e = tn.Turn.Error
	default:
		return false
	}
	kind, _ := e.Kind()
	return kind == protocol.CodexErrorUsageLimitExceeded
}
