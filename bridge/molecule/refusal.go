package molecule

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/molecule/platform"
)

// A SaaS tenant's guard answers a bare 404 on every route but register and heartbeat (and a
// few of its own) when X-Molecule-Org-Id names another org (MOLECULE.md section 9). A deleted
// workspace and a wrong WORKSPACE_ID answer 404 on the activity feed too. So once register has
// succeeded, a 404 on the feed or the ack is the platform refusing this workspace, not an older
// platform without the route: the inbox logs it once at error level, is not ready (Refused),
// degrades its heartbeat, and keeps polling with backoff so that a fix on the platform's side
// resumes answers without a restart.

// ErrWorkspaceRefused is wrapped by Refused's error (and the feed's) while the platform answers
// 404 on the workspace's activity feed after a successful register.
var ErrWorkspaceRefused = errors.New("the platform refuses this workspace (HTTP 404 after a successful register)")

// refusal is whether the platform refuses the workspace now. The feed sets it from its polls
// and acks; the heartbeat, the stream and the readiness probe read it.
type refusal struct {
	log         *zap.Logger
	workspaceID string
	orgID       string

	mu    sync.Mutex
	err   error     // nil while the platform accepts the workspace
	since time.Time // when the refusal began
	// first is closed once the first poll was answered (refused or not); change is closed at
	// the next change of err and replaced.
	first     chan struct{}
	firstDone bool
	change    chan struct{}
}

func newRefusal(log *zap.Logger, workspaceID, orgID string) *refusal {
	return &refusal{log: log, workspaceID: workspaceID, orgID: orgID,
		first: make(chan struct{}), change: make(chan struct{})}
}

// refusedErr is the typed error of a 404 after register: it wraps ErrWorkspaceRefused and
// cause (which names the call), and says what to do.
func (r *refusal) refusedErr(cause error) error {
	org := r.orgID
	if org == "" {
		org = "(not set)"
	}
	return fmt.Errorf("%w: %w; check MOLECULE_ORG_ID (%s) and WORKSPACE_ID (%s): the org id must be the UUID of the "+
		"organization that holds this workspace, and the workspace must exist there; MOLECULE_ORG_ID is read at start, "+
		"so changing it needs a restart; a workspace restored or routing repaired on the platform resumes by itself",
		ErrWorkspaceRefused, cause, org, r.workspaceID)
}

// refused records a 404 on call (after register) and returns its typed error. The first one of
// a refusal is logged at error level; the rest at debug.
func (r *refusal) refused(call string, cause error, fields ...zap.Field) error {
	err := r.refusedErr(cause)
	r.mu.Lock()
	begins := r.err == nil
	if begins {
		r.since = time.Now()
		r.changedLocked()
	}
	r.err = err
	r.answeredLocked()
	r.mu.Unlock()
	fields = append(fields, zap.String("call", call), zap.String("org_id", r.orgID))
	if begins {
		r.log.Error("the platform refuses this workspace (HTTP 404 after register): check MOLECULE_ORG_ID and WORKSPACE_ID; "+
			"MOLECULE_ORG_ID is read at start, so changing it needs a restart; nothing is answered meanwhile, "+
			"the heartbeat reports it and polling goes on with backoff", append(fields, zap.Error(err))...)
		return err
	}
	r.log.Debug(call+" refused (HTTP 404)", fields...)
	return err
}

// accepted records a poll the platform answered with rows: a refusal ends, logged once.
func (r *refusal) accepted() {
	r.mu.Lock()
	r.answeredLocked()
	was, since := r.err, r.since
	if was != nil {
		r.err = nil
		r.changedLocked()
	}
	r.mu.Unlock()
	if was != nil {
		r.log.Info("the platform accepts the workspace again; answering", zap.Duration("refused_for", time.Since(since)))
	}
}

// answered records that a poll got an answer (refused or not), for whoever waits for the first.
func (r *refusal) answered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answeredLocked()
}

func (r *refusal) answeredLocked() {
	if !r.firstDone {
		r.firstDone = true
		close(r.first)
	}
}

func (r *refusal) changedLocked() {
	close(r.change)
	r.change = make(chan struct{})
}

// current is the refusal's error, nil while the platform accepts the workspace (and for a nil
// refusal: a part built without one).
func (r *refusal) current() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// firstAnswer is closed once the first poll was answered.
func (r *refusal) firstAnswer() <-chan struct{} { return r.first }

// changes is closed at the next change (refused or accepted).
func (r *refusal) changes() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.change
}

// heartbeat is what the heartbeat says while refused: a task that tells the canvas why nothing
// is answered; "" while accepted.
func (r *refusal) heartbeat() (task, sample string) {
	err := r.current()
	if err == nil {
		return "", ""
	}
	return "not answering: the platform refuses this workspace's activity feed (HTTP 404); check MOLECULE_ORG_ID and WORKSPACE_ID", err.Error()
}

// isNotFound reports a 404 answer.
func isNotFound(err error) bool {
	var he *platform.HTTPError
	return errors.As(err, &he) && he.Status == http.StatusNotFound
}
