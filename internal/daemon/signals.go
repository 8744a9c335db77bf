package daemon

import (
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"
	"github.com/molecule-ai/codex-warm/internal/earlysignal"
)

// takeSignals returns the daemon's channels for SIGHUP (reload) and SIGTERM/SIGINT (stop).
// SIGHUP is caught at once: Go's default for it would end the daemon, and a reloaded image may
// be sent the next one at once. An image a reload started caught all three at initialization
// already (earlysignal); otherwise catchStops catches the stop signals once the daemon can
// drain.
func takeSignals() (hups, sigs chan os.Signal, early *earlysignal.Caught) {
	if early = earlysignal.Take(); early != nil {
		return early.Reload, early.Stop, early
	}
	hups, sigs = make(chan os.Signal, 1), make(chan os.Signal, 2)
	signal.Notify(hups, syscall.SIGHUP)
	return hups, sigs, nil
}

// catchStops catches SIGTERM and SIGINT on sigs, unless earlysignal did; a reloaded image logs
// how long a stop signal would have ended the daemon, from the old image's last handler to its
// own first (docs/HANDOFF.md).
func catchStops(sigs chan os.Signal, early *earlysignal.Caught, doc *handoff.Doc, getenv func(string) string, log *zap.Logger) {
	defer func() { _ = os.Unsetenv(handoff.EnvQuietAt) }()
	if early == nil {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		return
	}
	if doc == nil {
		return
	}
	var window time.Duration
	if ns, err := strconv.ParseInt(getenv(handoff.EnvQuietAt), 10, 64); err == nil {
		window = early.At.Sub(time.Unix(0, ns))
	}
	log.Info("reload: signals caught in the new image", zap.Duration("fatal_window", window))
}
