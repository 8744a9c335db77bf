package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/control"
	"github.com/molecule-ai/codex-warm/metrics"
	"github.com/molecule-ai/codex-warm/retention"
	"github.com/molecule-ai/codex-warm/sessions"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// parseAge reads a retention age: a number of days ("30d") or a Go duration ("720h"); "0" or
// "off" is off.
func parseAge(s string) (time.Duration, error) {
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

// ageFlag is a flag.Value for parseAge.
type ageFlag struct{ d *time.Duration }

func (a ageFlag) String() string {
	if a.d == nil || *a.d == 0 {
		return "off"
	}
	if *a.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*a.d/(24*time.Hour)), 10) + "d"
	}
	return a.d.String()
}

func (a ageFlag) Set(s string) error {
	d, err := parseAge(s)
	if err == nil {
		*a.d = d
	}
	return err
}

// retentionFlags registers the daemon's retention flags on e.
func retentionFlags(e *envFlags, c *runConfig) {
	for _, f := range []struct {
		p         *time.Duration
		name, env string
		usage     string
	}{
		{&c.ArchiveIdleAfter, "archive-idle-after", "CODEX_WARM_ARCHIVE_IDLE_AFTER",
			"archive the codex thread of a chat idle this long (30d, or a duration; off: never); the chat's next message unarchives it and the conversation continues. Frees no disk (docs/disk-and-growth.md)"},
		{&c.DeleteArchivedAfter, "delete-archived-after", "CODEX_WARM_DELETE_ARCHIVED_AFTER",
			"delete an archived thread for good this long after it was archived (90d, or a duration; off: never); this frees the disk, and the chat's uploads go with it. The chat's next message starts a new conversation and is told once"},
		{&c.UploadsMaxAge, "uploads-max-age", "CODEX_WARM_UPLOADS_MAX_AGE",
			"remove files users sent to chats (<cwd>/.chats/<chat>/uploads/) this long after they were saved, whatever became of the chat (30d, or a duration; off: only with their chat's deleted thread)"},
	} {
		if v := e.getenv(f.env); v != "" {
			d, err := parseAge(v)
			if err != nil {
				e.errs = append(e.errs, fmt.Errorf("env %s: %w", f.env, err))
			}
			*f.p = d
		}
		e.fs.Var(ageFlag{f.p}, f.name, f.usage+" (env "+f.env+")")
	}
	e.dur(&c.ArchiveSweepEvery, "archive-sweep-every", "CODEX_WARM_ARCHIVE_SWEEP_EVERY", supervisor.DefaultRetentionEvery,
		"how often the retention sweep of --archive-idle-after and --delete-archived-after runs")
}

// archiveVerb is the control socket's retention sweep; it answers a supervisor.SweepResult.
const archiveVerb = "POST /v1/archive"

// archiveRequest is archiveVerb's request: the ages as parseAge reads them ("30d", "off").
type archiveRequest struct {
	IdleAfter    string `json:"idle_after,omitempty"`
	DeleteAfter  string `json:"delete_after,omitempty"`
	UploadsAfter string `json:"uploads_after,omitempty"`
	DryRun       bool   `json:"dry_run,omitempty"`
}

// policy reads the request's ages; a bad one is the caller's error (400).
func (q archiveRequest) policy() (retention.Policy, error) {
	var p retention.Policy
	var err error
	if p.IdleAfter, err = parseAge(q.IdleAfter); err == nil {
		if p.DeleteAfter, err = parseAge(q.DeleteAfter); err == nil {
			p.UploadsAfter, err = parseAge(q.UploadsAfter)
		}
	}
	if err != nil {
		return p, control.Refuse(http.StatusBadRequest, err)
	}
	return p, nil
}

// archiveVerbs serves archiveVerb on the control socket.
func (d *daemon) archiveVerbs(cs *control.Server) {
	control.Handle(cs, archiveVerb, http.StatusOK, func(ctx context.Context, q archiveRequest) (supervisor.SweepResult, error) {
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

// cmdArchive runs the retention sweep once: through the running daemon (so that it never races
// the daemon's own state), or, when none runs, on the state directory under the daemon's lock
// with a codex child of its own.
func cmdArchive(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("archive", stderr)
	stateDir := fs.String("state-dir", defaultStateDir(getenv), "state directory of the daemon (env CODEX_CHANNEL_MOLECULE_STATE_DIR)")
	var p retention.Policy
	fs.Var(ageFlag{&p.IdleAfter}, "idle-after", "archive the threads of chats idle this long (30d or a duration)")
	fs.Var(ageFlag{&p.DeleteAfter}, "delete-after", "delete threads archived this long ago (90d or a duration)")
	fs.Var(ageFlag{&p.UploadsAfter}, "uploads-after", "remove uploads saved this long ago (30d or a duration)")
	workDirFlag := fs.String("cwd", "", "the daemon's --cwd, where the chats' uploads are, when no daemon runs (default: this directory)")
	dry := fs.Bool("dry-run", false, "list what would be archived and deleted, change nothing")
	codexBin := fs.String("codex-bin", getenv("CODEX_BIN"), "codex binary, when no daemon runs (env CODEX_BIN)")
	codexHome := fs.String("codex-home", getenv("CODEX_HOME"), "CODEX_HOME of the daemon's children, when no daemon runs (env CODEX_HOME; empty: codex's default)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return flagsError(err)
	}
	if !p.Any() {
		return errors.New("nothing to do: give --idle-after, --delete-after and/or --uploads-after")
	}
	req := archiveRequest{IdleAfter: ageFlag{&p.IdleAfter}.String(), DeleteAfter: ageFlag{&p.DeleteAfter}.String(),
		UploadsAfter: ageFlag{&p.UploadsAfter}.String(), DryRun: *dry}
	res, err := control.Call[archiveRequest, supervisor.SweepResult](ctx, control.NewClient(*stateDir), archiveVerb, req, 10*time.Minute)
	if errors.Is(err, control.ErrNoDaemon) {
		res, err = archiveOffline(ctx, *stateDir, workDir(*workDirFlag), *codexHome, *codexBin, codexBinSource(fs, *codexBin), p, *dry)
	}
	if err != nil {
		return err
	}
	printSweep(stdout, res, *asJSON)
	if len(res.Errors) > 0 {
		return exitCode(1)
	}
	return nil
}

// archiveOffline is cmdArchive with no daemon: the same sweep, by a supervisor of its own that
// serves no chat, under the state directory's lock (a daemon starting meanwhile waits for it).
func archiveOffline(ctx context.Context, dir, work, codexHome, bin, binFrom string, p retention.Policy, dry bool) (supervisor.SweepResult, error) {
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
	loc, err := findCodex(bin, binFrom)
	if err != nil && !dry {
		return supervisor.SweepResult{}, fmt.Errorf("find codex: %w", err)
	}
	sup, err := supervisor.New(supervisor.Config{
		AppServer:            appserver.Config{Bin: loc.Bin, CodexHome: codexHome, Env: childEnv(os.Environ()), Logger: log},
		Store:                store,
		StateDir:             dir,
		MaxChildren:          1,
		MemorySampleInterval: -1,
		Retention:            ret,
		WorkDir:              work,
		Logger:               log,
	})
	if err != nil {
		return supervisor.SweepResult{}, err
	}
	defer sup.Shutdown(context.WithoutCancel(ctx))
	return sup.ArchiveSweep(ctx, p, dry)
}

func printSweep(w io.Writer, res supervisor.SweepResult, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return
	}
	verb := map[bool]string{true: "would ", false: ""}[res.DryRun]
	for _, c := range res.Archived {
		fmt.Fprintf(w, "%sarchive chat %s thread %s (last turn %s)\n", verb, c.ChatKey, c.ThreadID, c.Since.Format(time.RFC3339))
	}
	for _, c := range res.Deleted {
		fmt.Fprintf(w, "%sdelete chat %s thread %s (archived %s)\n", verb, c.ChatKey, c.ThreadID, c.Since.Format(time.RFC3339))
	}
	for _, k := range res.Busy {
		fmt.Fprintf(w, "busy, left for later: chat %s\n", k)
	}
	for _, e := range res.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	if res.Uploads.Files > 0 {
		fmt.Fprintf(w, "removed %d uploads (%d bytes)\n", res.Uploads.Files, res.Uploads.Bytes)
	}
	fmt.Fprintf(w, "%d archived, %d deleted, %d busy, %d errors\n", len(res.Archived), len(res.Deleted), len(res.Busy), len(res.Errors))
}

// retentionMetrics reads the supervisor's archive log counts for the metrics.
func retentionMetrics(sup *supervisor.Supervisor) metrics.RetentionCounts {
	c := sup.RetentionCounts()
	return metrics.RetentionCounts{Archived: c.Archived, Deleted: c.Deleted, Unarchived: c.Unarchived, Told: c.Told, ArchivedNow: c.Current}
}
