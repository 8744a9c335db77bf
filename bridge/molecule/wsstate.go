package molecule

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
	"go.uber.org/zap"
)

// A paused or deleted workspace, as the platform has them (enteros-core workspace-server/
// internal/handlers/workspace_crud.go State, workspace_restart.go Pause, Resume, wsauth/tokens.go):
//
//   - GET /workspaces/{ws}/state answers {"status", "paused", "deleted": false} while the
//     workspace exists, and 404 {"deleted": true} once it is removed, to a credential that still
//     passes its auth check (an org API token, the admin token).
//   - Deleting a workspace revokes every token it has, and a token of a removed workspace never
//     validates again: its own token then gets 401 on /state and on every route behind the
//     workspace auth (activity, notify, ack), while /registry/heartbeat answers 200 (with no live
//     token left the registry lets the caller through), and /registry/register issues a new token
//     that every other route refuses as well.
//
// The inbox asks /state with every heartbeat (and once before its first poll). Paused: it stops
// polling and starts no turn (rows stay on the platform, unacknowledged; replies already made are
// still delivered) and asks again each heartbeat until the workspace is resumed. Deleted: Run
// returns an error wrapping ErrWorkspaceDeleted, and the daemon exits 0, so that a service
// manager's Restart=on-failure does not start it again. It judges the workspace deleted when:
//   - /state answers 404 with "deleted": true;
//   - a token the platform issued at this run's register is refused by /state (a fresh token is
//     refused only when its workspace is removed);
//   - /state refuses the workspace token while the heartbeat of the same beat passes, on
//     deletedAfterBeats beats in a row: the platform holds no live token for the workspace at
//     all, which is what a deletion leaves (and a move to another machine, whose new instance
//     registers for a new token: this one has nothing to do there either). A token rotated by
//     the platform leaves a live token behind, so the heartbeat refuses the old one too.
// A 404 without "deleted" (a platform without the route) and other failures change nothing.

// ErrWorkspaceDeleted is wrapped by Run's error when the platform says the workspace is deleted.
var ErrWorkspaceDeleted = errors.New("workspace deleted on the platform")

// deletedAfterBeats is how many heartbeats in a row must find the token refused by /state and
// accepted by the heartbeat (no live token) before the workspace counts as deleted: a token
// revoked and re-issued by the platform is without a live token for an instant only.
const deletedAfterBeats = 3

// pauseGate holds polling and new turns while the workspace is paused.
type pauseGate struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed when the workspace is resumed; replaced on pause
}

// set records the workspace paused or not and reports whether that changed.
func (g *pauseGate) set(paused bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == paused {
		return false
	}
	g.paused = paused
	if paused {
		g.resumed = make(chan struct{})
	} else {
		close(g.resumed)
	}
	return true
}

// isPaused reports whether the workspace is paused now.
func (g *pauseGate) isPaused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// wait returns at once unless the workspace is paused, else when it is resumed or ctx ends.
func (g *pauseGate) wait(ctx context.Context) error {
	g.mu.Lock()
	if !g.paused {
		g.mu.Unlock()
		return nil
	}
	ch := g.resumed
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beat sends the heartbeat, then asks the workspace's state.
func (w *workspace) beat(ctx context.Context) {
	ok := w.sendHeartbeat(ctx)
	w.checkState(ctx, ok)
}

// checkState asks /state and acts on the answer; heartbeatOK says whether the heartbeat of the
// same beat was accepted.
func (w *workspace) checkState(ctx context.Context, heartbeatOK bool) {
	bearer := w.issuedToken()
	st, err := w.client.WorkspaceState(ctx, bearer)
	if ctx.Err() != nil {
		return
	}
	refusedBeats := 0
	if st == platform.StateRefused && heartbeatOK {
		w.mu.Lock()
		w.refusedBeats++
		refusedBeats = w.refusedBeats
		w.mu.Unlock()
	} else {
		w.mu.Lock()
		w.refusedBeats = 0
		w.mu.Unlock()
	}
	switch {
	case st == platform.StateDeleted:
		w.workspaceDeleted("the platform's state route says the workspace is deleted")
	case st == platform.StateRefused && bearer != "":
		w.workspaceDeleted("the platform refuses the token it issued at register, which it does only for a removed workspace")
	case refusedBeats >= deletedAfterBeats:
		w.workspaceDeleted(fmt.Sprintf("the platform refused the workspace token on %d state checks in a row while it accepted the heartbeat: it holds no live token for the workspace, as a deletion leaves it", refusedBeats))
	case st == platform.StatePaused:
		if w.pause.set(true) {
			w.log.Warn("workspace paused on the platform: not answering until it is resumed (messages stay on the platform)",
				zap.Duration("checked_every", w.cfg.HeartbeatInterval))
		}
	case st == platform.StateRunning:
		if w.pause.set(false) {
			w.log.Info("workspace resumed on the platform: answering again")
		}
	case err != nil:
		w.log.Debug("workspace state not read", zap.Error(err))
	}
}

// workspaceDeleted ends Run with ErrWorkspaceDeleted.
func (w *workspace) workspaceDeleted(why string) {
	w.log.Warn("workspace deleted on the platform; stopping", zap.String("evidence", why))
	w.stopRun(fmt.Errorf("workspace %s: %w (%s)", w.cfg.WorkspaceID, ErrWorkspaceDeleted, why))
}

func (w *workspace) issuedToken() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.issued
}
