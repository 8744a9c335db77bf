package appserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// What codex 0.171 does with the calls retention relies on, on disk: thread/delete removes an
// archived thread's rollout from archived_sessions (the space comes back), unarchiving a deleted
// thread fails, and archiving twice or unarchiving a live thread fails without harm.
func TestRealRetentionCalls(t *testing.T) {
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
	size := rolloutSize(t, e.home, id)
	before := homeBytes(t, e.home)
	err = c.UnarchiveThread(ctx, id)
	t.Logf("unarchive of a live thread: %v", err)
	c2 := e.start(t, nil)
	err = c2.ArchiveThread(ctx, id)
	t.Logf("archive while another child holds the thread: %v", err)
	if err == nil {
		t.Fatal("archived a thread another child holds")
	}
	c.Close()
	if err := c2.ArchiveThread(ctx, id); err != nil {
		t.Fatalf("archive: %v", err)
	}
	err = c2.ArchiveThread(ctx, id)
	t.Logf("archive of an archived thread: %v", err)
	if got := rolloutDirs(t, e.home, id); got != "archived_sessions" {
		t.Fatalf("rollout under %q after archive", got)
	}
	archived := homeBytes(t, e.home)
	c3 := e.start(t, nil)
	if err := c3.DeleteThread(ctx, id); err != nil {
		t.Fatalf("delete of an archived thread: %v", err)
	}
	if got := rolloutDirs(t, e.home, id); got != "" {
		t.Fatalf("rollout under %q after delete, want gone", got)
	}
	deleted := homeBytes(t, e.home)
	t.Logf("rollout %d B; sessions/ + archived_sessions/: %d B before archiving, %d B archived, %d B deleted", size, before, archived, deleted)
	if archived != before || before-deleted != size {
		t.Errorf("archiving changed CODEX_HOME by %d B, deleting by %d B; want about 0 and at least the rollout's %d B",
			before-archived, before-deleted, size)
	}
	err = c3.UnarchiveThread(ctx, id)
	t.Logf("unarchive of a deleted thread: %v", err)
	if err == nil {
		t.Fatal("unarchive of a deleted thread succeeded")
	}
	err = c3.DeleteThread(ctx, id)
	t.Logf("delete of a deleted thread: %v", err)
	err = c3.ResumeThread(ctx, id, opts)
	t.Logf("resume of a deleted thread: %v", err)
}

// homeBytes is the size of the files under CODEX_HOME's two rollout folders (the SQLite files
// beside them change size with checkpoint timing, and codex's log database with every call).
func homeBytes(t *testing.T, home string) int64 {
	t.Helper()
	var n int64
	for _, dir := range []string{"sessions", "archived_sessions"} {
		filepath.Walk(filepath.Join(home, dir), func(path string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				n += fi.Size()
			}
			return nil
		})
	}
	return n
}

func rolloutSize(t *testing.T, home, thread string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(home, func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && filepath.Ext(path) == ".jsonl" && strings.HasPrefix(fi.Name(), "rollout-") && strings.Contains(fi.Name(), thread) {
			n += fi.Size()
		}
		return nil
	})
	return n
}
