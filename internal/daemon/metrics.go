package daemon

import (
	"fmt"
	"net/http"
	"time"

	"github.com/molecule-ai/codex-warm/internal/daemon/handoff"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/health"
	"github.com/molecule-ai/codex-warm/internal/metrics"
)

// metricsMaxConns bounds the metrics listener's connections: a scraper or two and probes need a
// handful; the rest of the descriptors belong to codex children.
const metricsMaxConns = 16

// serveMetrics starts the metrics listener on cfg.MetricsListen: /metrics, and the probes of
// the local inbox (/healthz, /readyz), behind the inbox's Host and token checks. It records the
// bound address in d.info before the control socket can report it. The server's goroutine is
// added to wg; a Serve failure goes to errs.
func (d *daemon) serveMetrics(met *metrics.Metrics, ready *health.Readiness, hdoc *handoff.Doc, errs chan<- error) error {
	cfg, log := d.cfg, d.log
	ln, err := listen(hdoc, handoff.ListenerMetrics, "tcp", cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", cfg.MetricsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", met.Handler())
	mux.HandleFunc("GET /healthz", health.Live)
	mux.Handle("GET /readyz", ready)
	handler := local.Guard(local.GuardConfig{Token: cfg.MetricsToken, AllowedHosts: cfg.MetricsAllowHosts,
		Realm: "codex-warm metrics", Logger: log.Named("metrics")}, mux)
	newSrv := func() *http.Server {
		return &http.Server{
			Handler: handler,
			// A scrape is a few kilobytes each way; these bound what a stalled client can hold.
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          local.HTTPErrorLog(log),
		}
	}
	d.info.MetricsListen = ln.Addr().String()
	kl := newKeptListener(ln)
	d.metricsSrv = &server{name: "metrics", ln: kl, serve: local.LimitConns(kl, metricsMaxConns, log), newSrv: newSrv, errs: errs}
	d.metricsSrv.start()
	log.Info("metrics listening", zap.String("addr", d.info.MetricsListen), zap.Bool("token", cfg.MetricsToken != ""))
	return nil
}
