package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/molecule-ai/codex-warm/internal/control"
	"github.com/molecule-ai/codex-warm/internal/daemon"
	"github.com/molecule-ai/codex-warm/internal/retention"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// cmdArchive runs the retention sweep once: through the running daemon (so that it never races
// the daemon's own state), or, when none runs, on the state directory under the daemon's lock
// with a codex child of its own.
func cmdArchive(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("archive", stderr)
	stateDir := fs.String("state-dir", daemon.DefaultStateDir(getenv), "state directory of the daemon (env CODEX_CHANNEL_MOLECULE_STATE_DIR)")
	var p retention.Policy
	fs.Var(daemon.NewAgeFlag(&p.IdleAfter), "idle-after", "archive the threads of chats idle this long (30d or a duration)")
	fs.Var(daemon.NewAgeFlag(&p.DeleteAfter), "delete-after", "delete threads archived this long ago (90d or a duration)")
	fs.Var(daemon.NewAgeFlag(&p.UploadsAfter), "uploads-after", "remove uploads saved this long ago (30d or a duration)")
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
	req := daemon.ArchiveRequest{IdleAfter: daemon.NewAgeFlag(&p.IdleAfter).String(), DeleteAfter: daemon.NewAgeFlag(&p.DeleteAfter).String(),
		UploadsAfter: daemon.NewAgeFlag(&p.UploadsAfter).String(), DryRun: *dry}
	res, err := control.Call[daemon.ArchiveRequest, supervisor.SweepResult](ctx, control.NewClient(*stateDir), daemon.ArchiveVerb, req, 10*time.Minute)
	if errors.Is(err, control.ErrNoDaemon) {
		res, err = daemon.ArchiveOffline(ctx, *stateDir, *workDirFlag, *codexHome, *codexBin, daemon.CodexBinSource(fs, *codexBin), p, *dry)
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

// printSweep prints a sweep's result, one line a chat, or with asJSON the result itself.
func printSweep(w io.Writer, res supervisor.SweepResult, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return
	}
	verb := map[bool]string{true: "would ", false: ""}[res.DryRun]
	for _, c := range res.Archived {
		since := "last turn"
		if c.Left {
			since = "the chat left it"
		}
		fmt.Fprintf(w, "%sarchive chat %s thread %s (%s %s)\n", verb, c.ChatKey, c.ThreadID, since, c.Since.Format(time.RFC3339))
	}
	for _, c := range res.Deleted {
		left := ""
		if c.Left {
			left = ", left by the chat"
		}
		fmt.Fprintf(w, "%sdelete chat %s thread %s (archived %s%s)\n", verb, c.ChatKey, c.ThreadID, c.Since.Format(time.RFC3339), left)
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
