package appserver

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/internal/protocol"
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
	return usageLimitAt(notifs, time.Now(), time.Local)
}

// usageLimitAt is UsageLimit at now, with codex's messages read in loc (the children's time
// zone: they inherit the daemon's environment).
func usageLimitAt(notifs []protocol.Notification, now time.Time, loc *time.Location) (resetsAt time.Time, ok bool) {
	best := -1.0
	var message time.Time
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
		if msg, isLimit := limitError(n); isLimit {
			ok = true
			if at, found := resetFromMessage(msg, now, loc); found {
				message = at
			}
		}
	}
	if !ok {
		return time.Time{}, false
	}
	if resetsAt.IsZero() {
		// No x-codex-* headers: the 429 body's resets_at reaches the client only in the text.
		resetsAt = message
	}
	return resetsAt, true
}

// resetFromMessage reads the reset codex wrote into a usage-limit message from the 429 body's
// resets_at. Measured on codex 0.169: "… or try again at 2:07 PM." for a reset later the same
// day, "… or try again at Dec 2nd, 2026 2:06 PM." for another day, in the local time zone, the
// minute cut off. The minute is rounded up, so the limit is never tried before its reset.
func resetFromMessage(msg string, now time.Time, loc *time.Location) (time.Time, bool) {
	const marker = "try again at "
	i := strings.LastIndex(msg, marker)
	if i < 0 {
		return time.Time{}, false
	}
	fields := strings.Fields(strings.TrimSuffix(strings.TrimSpace(msg[i+len(marker):]), "."))
	switch len(fields) {
	case 2: // 3:04 PM
		t, err := time.ParseInLocation("3:04 PM", fields[0]+" "+fields[1], loc)
		if err != nil {
			return time.Time{}, false
		}
		local := now.In(loc)
		at := time.Date(local.Year(), local.Month(), local.Day(), t.Hour(), t.Minute(), 0, 0, loc)
		if at.Add(time.Minute).Before(local) {
			at = at.AddDate(0, 0, 1) // past midnight
		}
		return at.Add(time.Minute), true
	case 5: // Jan 2nd, 2006 3:04 PM
		day := strings.TrimRight(strings.TrimSuffix(fields[1], ","), "stndrh")
		t, err := time.ParseInLocation("Jan 2 2006 3:04 PM", strings.Join([]string{fields[0], day, fields[2], fields[3], fields[4]}, " "), loc)
		if err != nil {
			return time.Time{}, false
		}
		return t.Add(time.Minute), true
	}
	return time.Time{}, false
}

// limitError reports an error notification or a failed turn/completed of kind
// usageLimitExceeded, and its message.
func limitError(n protocol.Notification) (string, bool) {
	var e *protocol.TurnError
	switch n.Method {
	case protocol.NotifyError:
		var en protocol.ErrorNotification
		if json.Unmarshal(n.Params, &en) != nil || en.WillRetry {
			return "", false
		}
		e = &en.Error
	case protocol.NotifyTurnCompleted:
		var tn protocol.TurnNotification
		if json.Unmarshal(n.Params, &tn) != nil || tn.Turn.Status != protocol.TurnFailed || tn.Turn.Error == nil {
			return "", false
		}
		e = tn.Turn.Error
	default:
		return "", false
	}
	kind, _ := e.Kind()
	return e.Message, kind == protocol.CodexErrorUsageLimitExceeded
}
