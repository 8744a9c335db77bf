package daemon

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/molecule-ai/codex-warm/bridge/local"
)

// metricsFlags are the Prometheus listener's, and its token.
func metricsFlags(e *envFlags, c *Config) func() error {
	e.str(&c.MetricsListen, "metrics-listen", "CODEX_WARM_METRICS_LISTEN", "", "address of the Prometheus metrics listener (/metrics, /healthz, /readyz), e.g. 127.0.0.1:9477; default: off. Loopback only unless --metrics-token is set")
	// Not bound through e.str: a flag default is printed by -h, and this one is a secret.
	e.fs.StringVar(&c.MetricsToken, "metrics-token", "", "bearer token the metrics listener requires (env CODEX_WARM_METRICS_TOKEN; prefer it: a flag shows in ps)")
	return func() error {
		if c.MetricsToken == "" {
			c.MetricsToken = e.getenv("CODEX_WARM_METRICS_TOKEN")
		}
		return c.resolveMetricsAccess()
	}
}

// resolveMetricsAccess refuses a metrics listener that other machines could reach without a
// metrics token, by the local inbox's rules.
func (c *Config) resolveMetricsAccess() error {
	c.MetricsToken = strings.TrimSpace(c.MetricsToken)
	if strings.ContainsAny(c.MetricsToken, "\r\n") {
		return errors.New("the metrics token contains a line break")
	}
	if c.MetricsListen == "" {
		return nil
	}
	if err := local.CheckListenAddress(c.MetricsListen, c.MetricsToken != ""); err != nil {
		return fmt.Errorf("--metrics-listen: %w (--metrics-token, CODEX_WARM_METRICS_TOKEN)", err)
	}
	if h, _, _ := net.SplitHostPort(c.MetricsListen); h != "" && !local.IsLoopbackHost(h) {
		c.MetricsAllowHosts = []string{h}
	}
	return nil
}
