package protocol

// Usage limits (codex 0.169, `codex app-server generate-ts`: v2/RateLimitSnapshot.ts,
// v2/AccountRateLimitsUpdatedNotification.ts, v2/CodexErrorInfo.ts).

// NotifyRateLimitsUpdated is account/rateLimits/updated: the account's usage windows, sent when
// an answer of the model carried rate-limit headers (also the 429 of a usage limit). It is
// process-wide: its params carry no threadId.
const NotifyRateLimitsUpdated = "account/rateLimits/updated"

// CodexErrorUsageLimitExceeded is the codexErrorInfo kind of a turn the model refused because
// the account's usage limit is reached (HTTP 429 usage_limit_reached). codex does not retry it.
const CodexErrorUsageLimitExceeded = "usageLimitExceeded"

// RateLimitsNotification is the params of account/rateLimits/updated. The update is sparse:
// a field that is null or absent is unknown, not cleared.
type RateLimitsNotification struct {
	RateLimits RateLimitSnapshot `json:"rateLimits"`
}

// RateLimitSnapshot is one account's usage windows (the fields the daemon reads; the schema has
// more).
type RateLimitSnapshot struct {
	LimitID   *string          `json:"limitId,omitempty"`
	Primary   *RateLimitWindow `json:"primary,omitempty"`
	Secondary *RateLimitWindow `json:"secondary,omitempty"`
	Credits   *CreditsSnapshot `json:"credits,omitempty"`
	PlanType  *string          `json:"planType,omitempty"`
}

// RateLimitWindow is one usage window: how much of it is used, its length and when it resets.
type RateLimitWindow struct {
	UsedPercent        float64 `json:"usedPercent"`
	WindowDurationMins *int64  `json:"windowDurationMins,omitempty"`
	// ResetsAt is epoch seconds.
	ResetsAt *int64 `json:"resetsAt,omitempty"`
}

// CreditsSnapshot is the account's credits.
type CreditsSnapshot struct {
	HasCredits bool    `json:"hasCredits"`
	Unlimited  bool    `json:"unlimited"`
	Balance    *string `json:"balance,omitempty"`
}
