package daemon

import (
	"fmt"
	"time"

	"github.com/molecule-ai/codex-warm/supervisor"
)

// retentionFlags are the retention sweep's: when a chat's thread is archived, when an archived
// thread and its uploads are deleted, and how often the sweep runs (retention.go).
func retentionFlags(e *envFlags, c *Config) func() error {
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
			d, err := ParseAge(v)
			if err != nil {
				e.errs = append(e.errs, fmt.Errorf("env %s: %w", f.env, err))
			}
			*f.p = d
		}
		e.fs.Var(AgeFlag{f.p}, f.name, f.usage+" (env "+f.env+")")
	}
	e.dur(&c.ArchiveSweepEvery, "archive-sweep-every", "CODEX_WARM_ARCHIVE_SWEEP_EVERY", supervisor.DefaultRetentionEvery,
		"how often the retention sweep of --archive-idle-after and --delete-archived-after runs")
	return nil
}
