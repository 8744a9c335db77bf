//go:build linux

package main

import (
	"net/http"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// The platform rotates the workspace token during the old image's life (the old token is
// answered 401 from then on, the new one written to <configs>/.auth_token). After a reload the
// new image authenticates with the rotated token from its first call (register, poll,
// heartbeat, replies: none is answered 401), and every row, the one sent as the reload starts
// too, is answered once.
func TestE2EReloadMoleculeRotatedToken(t *testing.T) {
	t.Parallel()
	e := newE2E(t, e2eConfig{})
	installReloadable(t, e)
	d := e.start()
	e.plat.Enqueue(moleculetest.CanvasMessage("before"))
	d.waitPlatform("the first reply", func() bool { return e.countReplies("reply #1: before") == 1 })

	const rotated = "rotated-workspace-token-9a8b7c6d5e"
	rotateWorkspaceToken(t, e, d, rotated)
	e.plat.Enqueue(moleculetest.CanvasMessage("rotated"))
	d.waitPlatform("the reply after the rotation", func() bool { return e.countReplies("reply #2: rotated") == 1 })

	installBin(t, e.bin)
	e.plat.Enqueue(moleculetest.CanvasMessage("as the reload starts"))
	if code, out := e.reloadCmd(); code != 0 {
		t.Fatalf("reload: exit %d: %s", code, out)
	}
	took := len(e.plat.Calls())
	e.plat.Enqueue(moleculetest.CanvasMessage("after the reload"))
	d.waitPlatform("every reply", func() bool {
		return e.repliesContaining(": as the reload starts") == 1 && e.repliesContaining(": after the reload") == 1
	})
	d.waitPolls(2)
	for _, c := range e.plat.Calls()[took:] {
		if got := c.Header.Get("Authorization"); got != "Bearer "+rotated || c.Status == http.StatusUnauthorized {
			t.Fatalf("after the reload, %s %s went with another token or was refused (HTTP %d)", c.Method, c.Path, c.Status)
		}
	}
	for _, text := range []string{"before", "rotated", "as the reload starts", "after the reload"} {
		if n := e.repliesContaining(": " + text); n != 1 {
			t.Errorf("%q answered %d times, want once", text, n)
		}
	}
	if doc := d.status(); doc.Daemon.PID != d.pid || doc.Daemon.Reloads != 1 {
		t.Fatalf("pid %d (want %d), reloads %d", doc.Daemon.PID, d.pid, doc.Daemon.Reloads)
	}
	d.stop(stopTimeout)
	d.checkLog()
}
