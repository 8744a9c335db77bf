package mockmodel

// Usage limits, rate-limit headers and token counts, as the real Responses API reports them.
//
// Wire facts (codex 0.169, docs/PROTOCOL.md): an account out of its usage window is answered
// HTTP 429 application/json {"error":{"type":"usage_limit_reached","message":…,"plan_type":…,
// "resets_at":<epoch s>}}; codex reads only resets_at and does not retry it. Every answer may
// carry x-codex-* rate-limit headers, which codex turns into account/rateLimits/updated.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// UsageLimit answers a request as the API answers an account whose usage limit is reached.
type UsageLimit struct {
	// ResetsAt is when the limit resets (resets_at, whole seconds).
	ResetsAt time.Time
	// PlanType is the body's plan_type; "" means "plus".
	PlanType string
}

// RateLimits are the x-codex-* rate-limit headers of an answer.
type RateLimits struct {
	// Primary and Secondary are the short (5-hour) and long (weekly) windows; nil: no headers.
	Primary, Secondary *RateWindow
	// ActiveLimit is x-codex-active-limit ("" leaves it out).
	ActiveLimit string
	// Credits, when set, adds the x-codex-credits-* headers.
	Credits *Credits
}

// RateWindow is one usage window.
type RateWindow struct {
	UsedPercent   float64
	WindowMinutes int
	ResetsAt      time.Time
}

// Credits is the account's credits.
type Credits struct {
	HasCredits bool
	Unlimited  bool
	Balance    string
}

// Usage overrides the token counts of a reply's response.completed.
type Usage struct {
	Input, CachedInput, Output, Reasoning int64
}

// UsageLimitBody is the JSON body of a usage-limit answer.
func UsageLimitBody(l UsageLimit) []byte {
	plan := l.PlanType
	if plan == "" {
		plan = "plus"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"type":      "usage_limit_reached",
		"message":   "The usage limit has been reached",
		"plan_type": plan,
		"resets_at": l.ResetsAt.Unix(),
	}})
	return b
}

// limitRateLimits is what a usage-limit answer reports when the reply names no rate limits: a
// primary window used up until the reset.
func limitRateLimits(l UsageLimit, rl *RateLimits) *RateLimits {
	if rl != nil {
		return rl
	}
	return &RateLimits{Primary: &RateWindow{UsedPercent: 100, WindowMinutes: 300, ResetsAt: l.ResetsAt}, ActiveLimit: "codex"}
}

// Headers are the rate limits as header names and values, in the form codex parses.
func (rl *RateLimits) Headers() map[string]string {
	h := map[string]string{}
	if rl == nil {
		return h
	}
	window := func(name string, w *RateWindow) {
		if w == nil {
			return
		}
		h["x-codex-"+name+"-used-percent"] = strconv.FormatFloat(w.UsedPercent, 'f', 1, 64)
		h["x-codex-"+name+"-window-minutes"] = strconv.Itoa(w.WindowMinutes)
		if !w.ResetsAt.IsZero() {
			h["x-codex-"+name+"-reset-at"] = strconv.FormatInt(w.ResetsAt.Unix(), 10)
		}
	}
	window("primary", rl.Primary)
	window("secondary", rl.Secondary)
	if rl.ActiveLimit != "" {
		h["x-codex-active-limit"] = rl.ActiveLimit
	}
	if c := rl.Credits; c != nil {
		h["x-codex-credits-has-credits"] = strconv.FormatBool(c.HasCredits)
		h["x-codex-credits-unlimited"] = strconv.FormatBool(c.Unlimited)
		if c.Balance != "" {
			h["x-codex-credits-balance"] = c.Balance
		}
	}
	return h
}

// setRateLimitHeaders adds the reply's rate-limit headers to an answer.
func setRateLimitHeaders(h http.Header, rl *RateLimits) {
	for k, v := range rl.Headers() {
		h.Set(k, v)
	}
}

// usageLimit answers 429 usage_limit_reached with the limit's rate-limit headers.
func (s *sseEmitter) usageLimit(reply Reply) {
	setRateLimitHeaders(s.w.Header(), limitRateLimits(*reply.UsageLimit, reply.RateLimits))
	s.w.Header().Set("Content-Type", "application/json")
	s.w.WriteHeader(http.StatusTooManyRequests)
	_, _ = s.w.Write(UsageLimitBody(*reply.UsageLimit))
}

// rateLimits sets the answer's rate-limit headers (before its first event writes the header).
func (s *sseEmitter) rateLimits(rl *RateLimits) { setRateLimitHeaders(s.w.Header(), rl) }

// usageLimit sends the error event codex maps to the same 429 with headers.
func (e *wsEmitter) usageLimit(reply Reply) {
	var ev map[string]any
	_ = json.Unmarshal(UsageLimitEvent(reply), &ev)
	e.event(ev)
}

// rateLimits sends a codex.rate_limits event: a websocket answer has no headers of its own.
func (e *wsEmitter) rateLimits(rl *RateLimits) {
	if rl == nil {
		return
	}
	e.event(rateLimitsEvent(rl))
}

// rateLimitsEvent is the websocket form of the rate-limit headers ({"type":"codex.rate_limits",
// "rate_limits":{"primary":{"used_percent","window_minutes","reset_at"},…},"credits":…}).
func rateLimitsEvent(rl *RateLimits) map[string]any {
	window := func(w *RateWindow) any {
		if w == nil {
			return nil
		}
		out := map[string]any{"used_percent": w.UsedPercent, "window_minutes": w.WindowMinutes}
		if !w.ResetsAt.IsZero() {
			out["reset_at"] = w.ResetsAt.Unix()
		}
		return out
	}
	ev := map[string]any{"type": "codex.rate_limits",
		"rate_limits": map[string]any{"primary": window(rl.Primary), "secondary": window(rl.Secondary)}}
	if c := rl.Credits; c != nil {
		credits := map[string]any{"has_credits": c.HasCredits, "unlimited": c.Unlimited}
		if c.Balance != "" {
			credits["balance"] = c.Balance
		}
		ev["credits"] = credits
	}
	if rl.ActiveLimit != "" {
		ev["metered_limit_name"] = rl.ActiveLimit
	}
	return ev
}

// UsageLimitEvent is the websocket form of a usage-limit answer: the error event codex maps to
// the same HTTP 429 with headers ({"type":"error","status":429,"error":{…},"headers":{…}}).
func UsageLimitEvent(reply Reply) []byte {
	var body map[string]json.RawMessage
	_ = json.Unmarshal(UsageLimitBody(*reply.UsageLimit), &body)
	b, _ := json.Marshal(map[string]any{
		"type":    "error",
		"status":  http.StatusTooManyRequests,
		"error":   body["error"],
		"headers": limitRateLimits(*reply.UsageLimit, reply.RateLimits).Headers(),
	})
	return b
}

// withUsage sets the usage of a response.completed event to u (nil: the mock's own counts).
func withUsage(ev map[string]any, u *Usage) map[string]any {
	if u == nil {
		return ev
	}
	ev["response"].(map[string]any)["usage"] = map[string]any{
		"input_tokens":          u.Input,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CachedInput},
		"output_tokens":         u.Output,
		"output_tokens_details": map[string]any{"reasoning_tokens": u.Reasoning},
		"total_tokens":          u.Input + u.Output,
	}
	return ev
}

// String describes a usage limit for logs.
func (l UsageLimit) String() string {
	return fmt.Sprintf("usage limit until %s", l.ResetsAt.UTC().Format(time.RFC3339))
}
