package appserver_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// On real codex, thread/archive moves the thread's rollout out of CODEX_HOME/sessions into
// CODEX_HOME/archived_sessions, and a fresh child cannot resume it; thread/unarchive moves it
// back, and the conversation continues where it was.
func TestRealArchiveAndUnarchiveThread(t *testing.T) {
	t.Parallel()
	e := newRealEnv(t, mockmodel.Config{})
	ctx := ctxTimeout(t, 2*time.Minute)
	opts := appserver.ThreadOptions{Cwd: e.cwd}
	c := e.start(t, nil)
	id, err := c.StartThread(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustComplete(t, c, ctx, id, "first")
	if got := rolloutDirs(t, e.home, id); got != "sessions" {
		t.Fatalf("before archiving the rollout is under %q, want sessions", got)
	}
	if err := c.ArchiveThread(ctx, id); err != nil {
		t.Fatalf("archive: %v", err)
	}
	if got := rolloutDirs(t, e.home, id); got != "archived_sessions" {
		t.Fatalf("after archiving the rollout is under %q, want archived_sessions", got)
	}

	c2 := e.start(t, nil)
	if err := c2.ResumeThread(ctx, id, opts); err == nil {
		t.Fatal("a fresh child resumed an archived thread")
	}
	if err := c2.UnarchiveThread(ctx, id); err != nil {
		t.Fatalf("unarchive: %v", err)
	}
	if got := rolloutDirs(t, e.home, id); got != "sessions" {
		t.Fatalf("after unarchiving the rollout is under %q, want sessions", got)
	}
	c3 := e.start(t, nil)
	if err := c3.ResumeThread(ctx, id, opts); err != nil {
		t.Fatalf("resume after unarchive: %v", err)
	}
	mustComplete(t, c3, ctx, id, "second")
	reqs := e.mock.Requests()
	if last := string(reqs[len(reqs)-1].Raw); !strings.Contains(last, "first") {
		t.Errorf("the turn after unarchiving did not carry the earlier conversation: %.300s", last)
	}
}

// rolloutDirs names the top folder of CODEX_HOME that holds thread's rollout ("" for none).
func rolloutDirs(t *testing.T, home, thread string) string {
	t.Helper()
	var where []string
	err := filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), "rollout-") && strings.Contains(d.Name(), thread) {
			rel, _ := filepath.Rel(home, path)
			where = append(where, strings.Split(rel, string(filepath.Separator))[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(where) > 1 {
		t.Fatalf("rollout of %s found in %v", thread, where)
	}
	if len(where) == 0 {
		return ""
	}
	return where[0]
}
