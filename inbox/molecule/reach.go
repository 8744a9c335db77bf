package molecule

import (
	"time"

	"go.uber.org/zap"
)

// platformCallFailed logs a failed poll or heartbeat at debug, and at info when it begins an
// outage (the caller counts it).
func (m *Inbox) platformCallFailed(call string, err error, fields ...zap.Field) {
	fields = append(fields, zap.String("call", call), zap.Error(err))
	m.log.Debug(call+" failed", fields...)
	if m.reach.Failed(call, time.Now()) {
		m.log.Info("platform unreachable: retrying with backoff; logged again when it answers", fields...)
	}
}

// platformCallOK notes a poll or heartbeat that went through, logging at info when it ends an
// outage.
func (m *Inbox) platformCallOK(call string) {
	if ends, lasted, failures := m.reach.Succeeded(call, time.Now()); ends {
		m.log.Info("platform reachable again", zap.String("call", call),
			zap.Duration("unreachable_for", lasted), zap.Int("failed_calls", failures))
	}
}
