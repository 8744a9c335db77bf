package molecule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"go.uber.org/zap"
)

// workspace is the workspace as the platform has it: registered, kept online by the heartbeat
// (its health, health.go), paused or deleted (wsstate.go), and the canvas chat's New session
// (session.go). mu guards runStart, lastRuntime, refusedBeats and issued.
type workspace struct {
	deps
	pause   *pauseGate
	window  *answerWindow
	outages *outages
	refusal *refusal
	session *canvasSession // the canvas chat's New-session reference (session.go)
	busy    func() (n int, first string)
	stopRun context.CancelCauseFunc // ends Run early: the workspace was deleted

	mu          sync.Mutex
	runStart    time.Time
	lastRuntime string // the runtime_state of the last heartbeat (health.go)
	// refusedBeats counts heartbeats in a row whose state check found the token refused while
	// the heartbeat passed; issued is a token the platform issued at register (wsstate.go).
	refusedBeats int
	issued       string
}

func newWorkspace(sh shared, session *canvasSession, busy func() (int, string)) *workspace {
	return &workspace{deps: sh.deps, pause: sh.pause, window: sh.window, outages: sh.outages, refusal: sh.refusal, session: session, busy: busy}
}

// begin starts the run: uptime counts from now, and stop ends Run when the workspace is deleted.
func (w *workspace) begin(stop context.CancelCauseFunc) {
	w.mu.Lock()
	w.runStart = time.Now()
	w.mu.Unlock()
	w.stopRun = stop
}

// registered acts on register's answer: it saves a token the platform issued, and says clearly
// when the platform did not take the workspace as a poll-mode one.
func (w *workspace) registered(a platform.RegisterAnswer) {
	if a.AuthToken != "" {
		if err := w.client.SaveToken(a.AuthToken); err != nil {
			w.log.Warn("the platform issued a workspace token at register; using it, but it could not be saved",
				zap.String("token_file", w.cfg.TokenFile), zap.Error(err))
		} else {
			w.log.Info("the platform issued a workspace token at register; saved it", zap.String("token_file", w.cfg.TokenFile))
		}
	}
	if a.DeliveryMode != "" && a.DeliveryMode != "poll" {
		// The platform takes the mode a register asks for (registry.go resolveDeliveryMode), so
		// this is a platform that does not know poll mode, or something between it and us.
		w.log.Error("the platform registered the workspace in delivery mode "+strconv.Quote(a.DeliveryMode)+", not poll, though poll was asked for: "+
			"it would push messages to the workspace's URL, which this daemon does not serve; polling on, "+
			"but check that the platform at this URL supports poll-mode workspaces",
			zap.String("delivery_mode", a.DeliveryMode))
	}
}

// register comes online before the first poll. A rejected token (401/403) and other client
// errors are fatal; network errors and 5xx are retried until ctx is done (the platform may be
// starting).
func (w *workspace) register(ctx context.Context) error {
	var answer platform.RegisterAnswer
	err := platform.RetryForever(ctx, w.cfg.RetryInitial, w.cfg.RetryMax, func() error {
		var err error
		answer, err = w.client.Register(ctx, w.cfg.AgentName)
		if answer.AuthToken != "" {
			w.mu.Lock()
			w.issued = answer.AuthToken
			w.mu.Unlock()
		}
		if he := (*platform.HTTPError)(nil); errors.As(err, &he) && !platform.RetryableStatus(he.Status) {
			return backoff.Permanent(err)
		}
		return err
	}, func(err error, wait time.Duration) {
		w.log.Warn("register failed; retrying", zap.Error(err), zap.Duration("retry_in", wait))
	})
	if err == nil {
		w.log.Info("registered with the platform", zap.String("platform", w.client.Origin()), zap.String("delivery_mode", answer.DeliveryMode))
		w.registered(answer)
		return nil
	}
	var he *platform.HTTPError
	if errors.As(err, &he) && he.Unauthorized() {
		return fmt.Errorf("%w: workspace %s, HTTP %d at register: check MOLECULE_WORKSPACE_TOKEN (or the file MOLECULE_WORKSPACE_TOKEN_FILE names, else <CONFIGS_DIR>/.auth_token) and MOLECULE_ORG_ID",
			ErrUnauthorized, w.cfg.WorkspaceID, he.Status)
	}
	if errors.As(err, &he) && he.Redirect() {
		return fmt.Errorf("register workspace %s: %w: set PLATFORM_URL to the address that answers", w.cfg.WorkspaceID, err)
	}
	return fmt.Errorf("register workspace %s: %w", w.cfg.WorkspaceID, err)
}
