package molecule

import (
	"context"
	"errors"
	"net/http"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// HTTPError is a non-2xx platform answer (the client's; the inbox's callers name it here).
type HTTPError = platform.HTTPError

// DefaultPeerTurnTimeout is how long an A2A send waits for a push peer's answer (the client's).
const DefaultPeerTurnTimeout = platform.DefaultPeerTurnTimeout

// ProbePlatform proves that the platform in cfg answers and accepts its token and workspace,
// changing nothing there: one authenticated read of the last second of the workspace's activity
// feed, the call the inbox polls with. Register would prove the same but is not read-only: it
// announces the workspace, its agent card and its delivery mode again, which would disturb a
// daemon already running for it. cfg needs PlatformURL, WorkspaceID and Token (as
// ConfigFromEnv fills them); RequestTimeout bounds the call and HTTPClient carries it
// (nil: a private client), as for New. A refusal is an *HTTPError (Unauthorized for a
// rejected token, 404 for an unknown workspace).
func ProbePlatform(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	c, done, err := probeClient(cfg)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	_, err = c.Poll(ctx, "", 1, platform.PageLimits{Rows: 1, Bytes: cfg.MaxPollBytes})
	return err
}

// ProbeEventStream reports whether the platform in cfg offers the workspace's event stream
// (stream.go): it connects, reads the answer's headers and hangs up, costing one request. An
// error is a failure to tell (the platform unreachable, the token refused).
func ProbeEventStream(ctx context.Context, cfg Config) (offered bool, err error) {
	cfg = cfg.withDefaults()
	c, done, err := probeClient(cfg)
	if err != nil {
		return false, err
	}
	defer done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := c.OpenEventStream(ctx, cancel, cfg.RequestTimeout)
	switch {
	case errors.Is(err, platform.ErrStreamAbsent):
		return false, nil
	case err != nil:
		return false, err
	}
	resp.Body.Close()
	return true, nil
}

// probeClient is a platform client for one probe, on cfg.HTTPClient or a private client whose
// idle connections done closes.
func probeClient(cfg Config) (c *platform.Client, done func(), err error) {
	hc, done := cfg.HTTPClient, func() {}
	if hc == nil {
		own := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		hc, done = own, own.CloseIdleConnections
	}
	if c, err = platform.New(clientOptions(cfg), hc); err != nil {
		done()
		return nil, nil, err
	}
	return c, done, nil
}
