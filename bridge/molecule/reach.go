package molecule

import (
	"errors"
	"strconv"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"go.uber.org/zap"
)

// outages turns the outcomes of polls and heartbeats into one log line per outage and one when
// it ends (platform.Reachability).
type outages struct {
	log   *zap.Logger
	reach platform.Reachability
}

func newOutages(log *zap.Logger) *outages { return &outages{log: log} }

// failed logs a failed poll or heartbeat at debug, and at info when it begins an
// outage (the caller counts it).
func (o *outages) failed(call string, err error, fields ...zap.Field) {
	fields = append(fields, zap.String("call", call), zap.Error(err))
	o.log.Debug(call+" failed", fields...)
	if !o.reach.Failed(call, time.Now()) {
		return
	}
	var he *platform.HTTPError
	if errors.As(err, &he) && he.Status < 500 {
		// The platform answered: it is not unreachable, it refuses the call.
		o.log.Info("platform refuses "+call+" (HTTP "+strconv.Itoa(he.Status)+"): retrying with backoff; logged again when it goes through", fields...)
		return
	}
	o.log.Info("platform unreachable: retrying with backoff; logged again when it answers", fields...)
}

// ok notes a poll or heartbeat that went through, logging at info when it ends an
// outage.
func (o *outages) ok(call string) {
	if ends, lasted, failures := o.reach.Succeeded(call, time.Now()); ends {
		o.log.Info("platform reachable again", zap.String("call", call),
			zap.Duration("unreachable_for", lasted), zap.Int("failed_calls", failures))
	}
}
