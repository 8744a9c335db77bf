package molecule

import (
	"net/http"
	"time"

	"github.com/molecule-ai/codex-warm/inbox/molecule/platform"
	"go.uber.org/zap"
)

// tenantRefused logs the tenant guard's refusal of a call: as an error naming MOLECULE_ORG_ID
// the first time (the first poll, when the variable is missing at start) and again after a
// call went through, at debug otherwise.
func (m *Inbox) tenantRefused(call string, err error, fields ...zap.Field) {
	fields = append(fields, zap.String("call", call), zap.Error(err))
	if m.orgMissingLogged.CompareAndSwap(false, true) {
		m.log.Error("MOLECULE_ORG_ID is not set: "+platform.OrgIDHint+"; nothing is dropped meanwhile (replies stay pending and are retried)", fields...)
		return
	}
	m.log.Debug(call+" refused by the tenant guard (MOLECULE_ORG_ID not set)", fields...)
}

// rateLimited logs an answer that closed the rate gate: every call waits for it.
func (m *Inbox) rateLimited(op string, wait time.Duration, status int) {
	if status == http.StatusTooManyRequests {
		m.c.rateLimited.Add(1)
		m.log.Warn("platform rate limit reached (HTTP 429): no platform call until Retry-After ends",
			zap.String("call", op), zap.Duration("retry_after", wait), zap.Bool("org_bucket", m.cfg.OrgID != ""))
		return
	}
	m.log.Info("platform rate limit spent for this window (X-RateLimit-Remaining 0): holding platform calls until it refills",
		zap.String("call", op), zap.Duration("wait", wait), zap.Bool("org_bucket", m.cfg.OrgID != ""))
}
