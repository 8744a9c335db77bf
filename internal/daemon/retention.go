package daemon

// The retention sweep's daemon side: its control verb (its flags: flags_retention.go), and the sweep a
// `supervisor archive` runs on the state directory when no daemon runs.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/metrics"
	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/sessions"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// ParseAge reads a retention age: a number of days ("30d") or a Go duration ("720h"); "0" or
// "off" is off.
func ParseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "0", "off":
		return 0, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("age %q: want a number of days (30d) or a duration (720h)", s)
		}
		return time.Duration(days * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: want a number of days (30d) or a duration (720h)", s)
	}
	return d, nil
}

// AgeFlag is a flag.Value for ParseAge, set into the duration it was made with (NewAgeFlag).
type AgeFlag struct{ d *time.Duration }

// NewAgeFlag is an AgeFlag that sets d.
func NewAgeFlag(d *time.Duration) AgeFlag { return AgeFlag{d} }

// String is the age as ParseAge reads it: "off", days ("30d") or a duration.
func (a AgeFlag) String() string {
	if a.d == nil || *a.d == 0 {
		return "off"
	}
	if *a.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*a.d/(24*time.Hour)), 10) + "d"
	}
	return a.d.String()
}

// Set reads s with ParseAge.
func (a AgeFlag) Set(s string) error {
	d, err := ParseAge(s)
	if err == nil {
		*a.d = d
	}
	return err
}

// ArchiveVerb is the control socket's retention sweep; it answers a supervisor.SweepResult.
const ArchiveVerb = "POST /v1/archive"

// ArchiveRequest is ArchiveVerb's request: the ages as ParseAge reads them ("30d", "off").
type ArchiveRequest struct {
	IdleAfter    string `json:"idle_after,omitempty"`
	DeleteAfter  string `json:"delete_after,omitempty"`
	UploadsAfter string `json:"uploads_after,omitempty"`
	DryRun       bool   `json:"dry_run,omitempty"`
}

// policy reads the request's ages; a bad one is the caller's error (400).
func (q ArchiveRequest) policy() (retention.Policy, error) {
	var p retention.Policy
	var err error
	if p.IdleAfter, err = ParseAge(q.IdleAfter); err == nil {
		if p.DeleteAfter, err = ParseAge(q.DeleteAfter); err == nil {
			p.UploadsAfter, err = ParseAge(q.UploadsAfter)
		}
	}
	if err != nil {
		return p, control.Refuse(http.StatusBadRequest, err)
	}
	return p, nil
}

// archiveVerbs serves ArchiveVerb on the control socket.
func (d *daemon) archiveVerbs(cs *control.Server) {
	control.Handle(cs, ArchiveVerb, http.StatusOK, func(ctx context.Context, q ArchiveRequest) (supervisor.SweepResult, error) {
		p, err := q.policy()
		if err != nil {
			return supervisor.SweepResult{}, err
		}
		res, err := d.sup.ArchiveSweep(ctx, p, q.DryRun)
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
		}
		return res, nil
	})
}

// ArchiveOffline is the sweep `supervisor archive` runs when no daemon runs: the same sweep as
// ArchiveVerb's, by a supervisor of its own that serves no chat (codex bin, found from binFrom as
// FindCodex does, in codexHome; the uploads under cwd, the daemon's --cwd), under the state directory's lock (a daemon starting meanwhile waits for it).
func ArchiveOffline(ctx context.Context, dir, cwd, codexHome, bin, binFrom string, p retention.Policy, dry bool) (supervisor.SweepResult, error) {
	lock, err := lockStateDir(dir)
	if err != nil {
		return supervisor.SweepResult{}, err
	}
	defer lock.Close()
	log := zap.NewNop()
	store, err := sessions.Open(sessions.Config{Dir: dir, Logger: log})
	if err != nil {
		return supervisor.SweepResult{}, err
	}
	ret, err := retention.Open(retention.Config{Dir: dir, Store: store, Logger: log})
	if err != nil {
		return supervisor.SweepResult{}, err
	}
	loc, err := FindCodex(bin, binFrom)
	if err != nil && !dry {
		return supervisor.SweepResult{}, fmt.Errorf("find codex: %w", err)
	}
	if loc.Bin == "" {
		loc.Bin = "codex" // a dry run starts no child: only the pool's config needs a name
	}
	sup, err := supervisor.New(supervisor.Config{
		AppServer:            appserver.Config{Bin: loc.Bin, CodexHome: codexHome, Env: childEnv(os.Environ()), Logger: log},
		Store:                store,
		StateDir:             dir,
		MaxChildren:          1,
		MemorySampleInterval: -1,
		Retention:            ret,
		WorkDir:              workDir(cwd),
		Logger:               log,
	})
	if err != nil {
		return supervisor.SweepResult{}, err
	}
	defer sup.Shutdown(context.WithoutCancel(ctx))
	return sup.ArchiveSweep(ctx, p, dry)
}

// retentionMetrics reads the supervisor's archive log counts for the metrics.
func retentionMetrics(sup *supervisor.Supervisor) metrics.RetentionCounts {
	c := sup.RetentionCounts()
	return metrics.RetentionCounts{Archived: c.Archived, Deleted: c.Deleted, Unarchived: c.Unarchived, Told: c.Told, ArchivedNow: c.Current, LeftNow: c.Left}
}
