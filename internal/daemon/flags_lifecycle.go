package daemon

import (
	"fmt"
	"time"
)

// lifecycleFlags bound a stop's drain and a reload's takeover.
func lifecycleFlags(e *envFlags, c *Config) func() error {
	e.dur(&c.DrainTimeout, "drain-timeout", "CODEX_WARM_DRAIN_TIMEOUT", 30*time.Second, "on SIGTERM, let running turns finish this long before interrupting them")
	e.dur(&c.TakeoverTimeout, "takeover-timeout", "CODEX_WARM_TAKEOVER_TIMEOUT", defaultTakeoverTimeout, "reload: a new image that does not serve within this long gives everything back to the previous binary (docs/HANDOFF.md)")
	return func() error {
		if c.TakeoverTimeout <= 0 {
			return fmt.Errorf("--takeover-timeout %s: must be > 0", c.TakeoverTimeout)
		}
		return nil
	}
}
