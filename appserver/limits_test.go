package appserver

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

func notif(method, params string) protocol.Notification {
	return protocol.Notification{Method: method, Params: json.RawMessage(params)}
}

// The shapes are codex 0.169's, recorded from a turn the mock model answered 429
// usage_limit_reached (TestRealUsageLimit).
const (
	recordedLimitRateLimits = `{"rateLimits":{"credits":null,"individualLimit":null,"limitId":"codex","limitName":null,"normalModelSlug":null,"planType":null,"primary":{"resetsAt":1795621141,"usedPercent":100,"windowDurationMins":300},"rateLimitReachedType":null,"secondary":null,"spendControlReached":null}}`
	recordedLimitError      = `{"error":{"additionalDetails":null,"codexErrorInfo":"usageLimitExceeded","message":"You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 3:39 PM.","misalignment":null},"threadId":"t","turnId":"u","willRetry":false}`
	recordedLimitCompleted  = `{"threadId":"t","turn":{"completedAt":1795613162,"durationMs":64,"error":{"additionalDetails":null,"codexErrorInfo":"usageLimitExceeded","message":"You’ve hit your usage limit. … try again at 3:39 PM.","misalignment":null},"id":"u","items":[],"status":"failed"}}`
)

func TestUsageLimit(t *testing.T) {
	reset := time.Unix(1795621141, 0)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	// The recorded messages say "try again at 3:39 PM.": read at now in UTC, rounded up.
	fromText := time.Date(2026, 11, 26, 15, 40, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		notifs []protocol.Notification
		ok     bool
		at     time.Time
	}{
		{"recorded turn", []protocol.Notification{notif(protocol.NotifyRateLimitsUpdated, recordedLimitRateLimits),
			notif(protocol.NotifyError, recordedLimitError), notif(protocol.NotifyTurnCompleted, recordedLimitCompleted)}, true, reset},
		{"turn/completed alone: the reset from its text", []protocol.Notification{notif(protocol.NotifyTurnCompleted, recordedLimitCompleted)}, true, fromText},
		{"no reset anywhere", []protocol.Notification{notif(protocol.NotifyError, `{"error":{"codexErrorInfo":"usageLimitExceeded","message":"You’ve hit your usage limit."},"willRetry":false}`)}, true, time.Time{}},
		// Measured on codex 0.169: a 429 body resets_at 6 days away without x-codex-* headers.
		{"another day, no headers", []protocol.Notification{
			notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":{"limitId":"codex","primary":null,"secondary":null}}`),
			notif(protocol.NotifyError, `{"error":{"codexErrorInfo":"usageLimitExceeded","message":"You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at Dec 2nd, 2026 2:06 PM."},"willRetry":false}`)},
			true, time.Date(2026, 12, 2, 14, 7, 0, 0, time.UTC)},
		{"later today, no headers", []protocol.Notification{
			notif(protocol.NotifyError, `{"error":{"codexErrorInfo":"usageLimitExceeded","message":"… or try again at 12:00 PM."},"willRetry":false}`)},
			true, time.Date(2026, 11, 26, 12, 1, 0, 0, time.UTC)},
		{"past midnight, no headers", []protocol.Notification{
			notif(protocol.NotifyError, `{"error":{"codexErrorInfo":"usageLimitExceeded","message":"… or try again at 11:30 AM."},"willRetry":false}`)},
			true, time.Date(2026, 11, 27, 11, 31, 0, 0, time.UTC)},
		{"the used-up window wins over a later one", []protocol.Notification{
			notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":{"primary":{"usedPercent":100,"resetsAt":100},"secondary":{"usedPercent":40,"resetsAt":900}}}`),
			notif(protocol.NotifyError, recordedLimitError)}, true, time.Unix(100, 0)},
		{"no window used up: the one nearest its limit", []protocol.Notification{
			notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":{"primary":{"usedPercent":20,"resetsAt":100},"secondary":{"usedPercent":40,"resetsAt":900}}}`),
			notif(protocol.NotifyError, recordedLimitError)}, true, time.Unix(900, 0)},
		// The two windows: 5 hours at 99 % resetting in 40 s, a week at 20 % resetting in
		// 6 days. Before: parked for 6 days.
		{"the window at 99 % wins over a later one at 20 %", []protocol.Notification{
			notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":{"primary":{"usedPercent":99,"windowDurationMins":300,"resetsAt":1040},"secondary":{"usedPercent":20,"windowDurationMins":10080,"resetsAt":519400}}}`),
			notif(protocol.NotifyError, recordedLimitError)}, true, time.Unix(1040, 0)},
		{"two windows used up: the later reset", []protocol.Notification{
			notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":{"primary":{"usedPercent":100,"resetsAt":100},"secondary":{"usedPercent":100,"resetsAt":900}}}`),
			notif(protocol.NotifyError, recordedLimitError)}, true, time.Unix(900, 0)},
		{"missing and null fields", []protocol.Notification{
			notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":{"primary":{"usedPercent":100},"secondary":null}}`),
			notif(protocol.NotifyRateLimitsUpdated, `{}`), notif(protocol.NotifyRateLimitsUpdated, `[1,`),
			notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":{"primary":{"usedPercent":"lots","resetsAt":"soon"}}}`),
			notif(protocol.NotifyError, recordedLimitError)}, true, fromText},
		{"a retried error is not the end", []protocol.Notification{notif(protocol.NotifyError, `{"error":{"codexErrorInfo":"usageLimitExceeded","message":"x"},"willRetry":true}`)}, false, time.Time{}},
		{"another failure", []protocol.Notification{notif(protocol.NotifyRateLimitsUpdated, recordedLimitRateLimits),
			notif(protocol.NotifyError, `{"error":{"codexErrorInfo":"internalServerError","message":"x"},"willRetry":false}`)}, false, time.Time{}},
		{"a completed turn", []protocol.Notification{notif(protocol.NotifyTurnCompleted, `{"turn":{"id":"u","status":"completed","error":{"codexErrorInfo":"usageLimitExceeded"}}}`)}, false, time.Time{}},
	} {
		at, ok := usageLimitAt(tc.notifs, now, time.UTC)
		if ok != tc.ok || !at.Equal(tc.at) {
			t.Errorf("%s: UsageLimit = %v, %v; want %v, %v", tc.name, at, ok, tc.at, tc.ok)
		}
	}
}

func TestRateLimitsDecode(t *testing.T) {
	rl, ok := RateLimits(notif(protocol.NotifyRateLimitsUpdated, recordedLimitRateLimits))
	if !ok || rl.Primary == nil || rl.Primary.UsedPercent != 100 || *rl.Primary.WindowDurationMins != 300 || *rl.Primary.ResetsAt != 1795621141 ||
		rl.Secondary != nil || rl.Credits != nil || *rl.LimitID != "codex" {
		t.Errorf("RateLimits = %+v, %v", rl, ok)
	}
	if _, ok := RateLimits(notif(protocol.NotifyRateLimitsUpdated, `{"rateLimits":7}`)); ok {
		t.Error("a malformed notification decoded")
	}
	if _, ok := RateLimits(notif(protocol.NotifyError, recordedLimitError)); ok {
		t.Error("another method decoded")
	}
}
