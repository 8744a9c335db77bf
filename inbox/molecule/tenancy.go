package molecule

import (
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// OrgIDHint is what to do about the tenant guard's 400 TENANT_ORG_HEADER_REQUIRED.
const OrgIDHint = "the platform is a SaaS tenant and needs X-Molecule-Org-Id on every call but register and heartbeat: " +
	"set MOLECULE_ORG_ID to the organization's UUID and restart the daemon"

// isTenantOrgRequired reports the tenant guard's refusal of a call without X-Molecule-Org-Id.
func isTenantOrgRequired(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.TenantOrgRequired()
}

// isRateLimited reports a 429.
func isRateLimited(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.RateLimited()
}

// tenantRefused logs the tenant guard's refusal of a call: as an error naming MOLECULE_ORG_ID
// the first time (the first poll, when the variable is missing at start) and again after a
// call went through, at debug otherwise.
func (m *Inbox) tenantRefused(call string, err error, fields ...zap.Field) {
	fields = append(fields, zap.String("call", call), zap.Error(err))
	if m.orgMissingLogged.CompareAndSwap(false, true) {
		m.log.Error("MOLECULE_ORG_ID is not set: "+OrgIDHint+"; nothing is dropped meanwhile (replies stay pending and are retried)", fields...)
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
