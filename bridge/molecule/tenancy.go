package molecule

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"go.uber.org/zap"
)

// tenancyLog logs the tenant guard's refusals (MOLECULE_ORG_ID missing) once until a poll goes
// through.
type tenancyLog struct {
	log    *zap.Logger
	logged atomic.Bool
}

func newTenancyLog(log *zap.Logger) *tenancyLog { return &tenancyLog{log: log} }

// clear says a poll went through: the next refusal is logged as an error again.
func (t *tenancyLog) clear() { t.logged.Store(false) }

// refused logs the tenant guard's refusal of a call: as an error naming MOLECULE_ORG_ID
// the first time (the first poll, when the variable is missing at start) and again after a
// call went through, at debug otherwise.
func (t *tenancyLog) refused(call string, err error, fields ...zap.Field) {
	fields = append(fields, zap.String("call", call), zap.Error(err))
	if t.logged.CompareAndSwap(false, true) {
		t.log.Error("MOLECULE_ORG_ID is not set: "+platform.OrgIDHint+"; nothing is dropped meanwhile (replies stay pending and are retried)", fields...)
		return
	}
	t.log.Debug(call+" refused by the tenant guard (MOLECULE_ORG_ID not set)", fields...)
}

// rateLimited logs an answer that closed the rate gate (every call waits for it) and counts a 429.
func rateLimited(log *zap.Logger, c *counters, orgBucket bool) func(op string, wait time.Duration, status int) {
	return func(op string, wait time.Duration, status int) {
		if status == http.StatusTooManyRequests {
			c.rateLimited.Add(1)
			log.Warn("platform rate limit reached (HTTP 429): no platform call until Retry-After ends",
				zap.String("call", op), zap.Duration("retry_after", wait), zap.Bool("org_bucket", orgBucket))
			return
		}
		log.Info("platform rate budget spent for this window (down to 0, or in tenant mode to the tenth kept for the org's canvas users): holding platform calls until it refills",
			zap.String("call", op), zap.Duration("wait", wait), zap.Bool("org_bucket", orgBucket))
	}
}
