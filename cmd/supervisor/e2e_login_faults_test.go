//go:build linux

package main

// The login the daemon owns under the faults of issue 27, on real codex with a token endpoint
// on loopback that rotates and refuses reuse (codexauthtest). Each case lost the login before:
// a full disk during the write-back brought the spent token back; a live auth.lock holder hung
// the write-back (and SIGTERM); a late answer was given up on and its token sent again; two
// daemons on one CODEX_HOME spent one token twice.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/local"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

// CODEX_HOME on a small tmpfs that is full while the daemon writes the rotated login back: the
// message is answered, status warns, the write is retried once there is room, and the next
// refresh spends the live token, not the spent one the file still held.
func TestE2EChatGPTWriteBackOnFullDisk(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	// The tmpfs goes over the environment's CODEX_HOME; its config and login are written again.
	if err := syscall.Mount("tmpfs", e.codexHome, "tmpfs", 0, "size=32m,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs as CODEX_HOME (the e2e tests run as root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(e.codexHome, syscall.MNT_DETACH) })
	if err := e.mock.WriteCodexHomeChatGPT(e.codexHome); err != nil {
		t.Fatal(err)
	}
	if err := e.is.WriteAuthFile(e.codexHome); err != nil {
		t.Fatal(err)
	}
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	c.send("x", "before")
	spent, _ := e.authTokens()

	filler := filepath.Join(e.codexHome, "filler")
	fillDisk(t, filler)
	e.is.Revoke()
	// codex itself may fail to write its own files on the full disk; the daemon's refresh is
	// what is under test, so the reply is not required to be the model's.
	c.post("x", `{"text": "on a full disk"}`)
	if e.is.Calls() != 1 {
		t.Fatalf("%d token calls, want the one refresh", e.is.Calls())
	}
	st := e.tokenStatus(d)
	if st.WriteBackError == "" || st.State != codexauth.StateValid {
		t.Errorf("status %+v, want valid with a write-back error", st)
	}
	if code, reason := getReady(t, d); code == 200 || !strings.Contains(reason, "do not restart") {
		t.Errorf("readyz %d %q, want not ready with the write-back reason", code, reason)
	}
	_, out := runStatus(t, "--state-dir", e.stateDir)
	if !strings.Contains(out, "could not be written back") {
		t.Errorf("status table lacks the write-back warning:\n%s", out)
	}
	if rt, _ := e.authTokens(); rt != spent {
		t.Fatal("auth.json changed on a full disk?")
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	d.waitUntil("the write-back retried", func() bool { return e.tokenStatus(d).WriteBackError == "" })
	if rt, _ := e.authTokens(); rt != e.is.LiveRefreshToken() {
		t.Error("auth.json does not hold the live refresh token after the retry")
	}
	e.is.Revoke()
	// A new chat: codex may have lost chat x's thread files on the full disk.
	if r := c.send("y", "after"); r.Status != "completed" {
		t.Errorf("after the disk was freed: %+v", r)
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 2 || reused != 0 {
		t.Errorf("%d token calls, %d with a spent token; want 2 and 0", calls, reused)
	}
	d.stop(stopTimeout)
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{64 << 10, 512} {
		buf := make([]byte, n)
		for err == nil {
			_, err = f.Write(buf)
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("filling %s: %v", path, err)
		}
		err = nil
	}
}

// Another live process holds auth.lock: the daemon spends nothing, the message is told the
// renewal failed, SIGTERM still stops the daemon at once, and after a restart the login is
// intact (before: the token rotated, the write-back hung on the lock forever, SIGTERM did not
// stop the daemon, and auth.json kept the spent token).
func TestE2EChatGPTLockHeldByAnotherProcess(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	c.send("x", "before")
	holder := holdLock(t, filepath.Join(e.codexHome, codexauth.LockFile))
	e.is.Revoke()
	code, body, _ := c.post("x", `{"text": "while the lock is held"}`)
	if strings.Contains(string(body), "codex login") || !strings.Contains(string(body), "could not renew") {
		t.Errorf("with the lock held: HTTP %d %s, want the renewal-failed text", code, body)
	}
	if e.is.Calls() != 0 {
		t.Errorf("%d token calls while another process held auth.lock", e.is.Calls())
	}
	d.waitUntil("status names the lock holder", func() bool {
		return strings.Contains(e.tokenStatus(d).LastError, "held by pid")
	})
	if took := d.stop(15 * time.Second); took > 15*time.Second {
		t.Errorf("SIGTERM took %s with the lock held", took)
	}
	holder.release()

	d = e.start("--spares", "0")
	if r := newLocalClient(t, d).send("x", "after"); r.Status != "completed" {
		t.Errorf("after the holder let go: %+v", r)
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Errorf("%d token calls, %d reused; want 1 and 0", calls, reused)
	}
	d.stop(stopTimeout)
}

// lockHolder is another process holding a flock.
type lockHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func holdLock(t *testing.T, path string) *lockHolder {
	t.Helper()
	cmd := exec.Command("flock", "-x", path, "-c", "echo locked; read x || true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("lock holder: %q %v", buf, err)
	}
	h := &lockHolder{cmd: cmd, stdin: stdin}
	t.Cleanup(h.release)
	return h
}

func (h *lockHolder) release() {
	if h.stdin != nil {
		h.stdin.Close()
		_ = h.cmd.Wait()
		h.stdin = nil
	}
}

// The endpoint rotates but answers late: the message is told the renewal failed in time, the
// answer is still awaited off the chat's path and becomes the login, and the refresh token is
// never sent again (before: given up at 8 s, sent again, refused as reused, the login gone).
func TestE2EChatGPTLateAnswer(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	c.send("x", "before")
	e.is.Revoke()
	e.is.SetFault(codexauthtest.FaultLate)
	if _, body, _ := c.post("x", `{"text": "late"}`); !strings.Contains(string(body), "could not renew") {
		t.Errorf("late answer: %s, want the renewal-failed text", body)
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateFailing || !strings.Contains(st.LastError, "awaited") {
		t.Errorf("status while the answer is awaited: %+v", st)
	}
	e.is.Release()
	d.waitUntil("the late answer adopted", func() bool {
		return e.tokenStatus(d).LastOutcome == codexauth.OutcomeRefreshed
	})
	e.is.SetFault(codexauthtest.FaultNone)
	if r := c.send("x", "after"); r.Status != "completed" {
		t.Errorf("after the late answer: %+v", r)
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Errorf("%d token calls, %d reused; want 1 and 0", calls, reused)
	}
	if refresh, _ := e.authTokens(); refresh != e.is.LiveRefreshToken() {
		t.Error("auth.json does not hold the late answer's refresh token")
	}
	d.stop(stopTimeout)
}

// Two daemons on one CODEX_HOME (two workspaces on one host) meet a refused token together: the
// lock held across the call makes one refresh, the other daemon adopts it (before: 5 runs of 7
// spent one refresh token twice).
func TestE2EChatGPTTwoDaemonsOneHome(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	other := newE2E(t, e2eConfig{Local: true, Authorize: e.is.Accepts,
		Env: []string{codexauth.TokenURLEnv + "=" + e.is.URL()}})
	other.codexHome = e.codexHome
	d1, d2 := e.start("--spares", "0"), other.start("--spares", "0")
	c1, c2 := newLocalClient(t, d1), newLocalClient(t, d2)
	c1.send("x", "warm 1")
	c2.send("x", "warm 2")
	e.is.Revoke()
	var wg sync.WaitGroup
	replies := make([]local.Reply, 2)
	for i, c := range []*localClient{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = c.send("x", "together")
		}()
	}
	wg.Wait()
	for i, r := range replies {
		if r.Status != "completed" {
			t.Errorf("daemon %d: %+v", i+1, r)
		}
	}
	if calls, reused := e.is.Calls(), e.is.Reused(); calls != 1 || reused != 0 {
		t.Errorf("%d token calls, %d reused; want 1 and 0", calls, reused)
	}
	d1.stop(stopTimeout)
	d2.stop(stopTimeout)
}

// Access tokens that live 2 minutes, less than the 5-minute refresh-ahead: the daemon refreshes
// at half their life, not at once and again in a loop (before: 1,100-1,200 token calls a minute,
// each rewriting auth.json).
func TestE2EChatGPTShortLivedTokensPaced(t *testing.T) {
	e := newTokenE2E(t, 2*time.Minute)
	d := e.start()
	c := newLocalClient(t, d)
	for i := range 3 {
		if r := c.send("x", fmt.Sprintf("message %d", i)); r.Status != "completed" {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	// The login was minted at most a few seconds ago: half its life is a minute away.
	if calls := e.is.Calls(); calls != 0 {
		t.Errorf("%d token calls within the first seconds of a 2-minute token, want 0 (refresh at half its life)", calls)
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateValid {
		t.Errorf("status %+v", st)
	}
	d.stop(stopTimeout)
}

// `codex logout` while the daemon runs: the login is used no more (before: the daemon kept it
// alive and went on refreshing it); a new `codex login` brings it back.
func TestE2EChatGPTLogout(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	c.send("x", "before")
	if err := os.Remove(filepath.Join(e.codexHome, codexauth.AuthFile)); err != nil {
		t.Fatal(err)
	}
	e.is.Revoke()
	requests := len(e.mock.Requests()) + e.mock.Unauthorized()
	code, body, _ := c.post("x", `{"text": "after logout"}`)
	if code != http.StatusBadGateway || !strings.Contains(string(body), "codex login") {
		t.Errorf("after logout: HTTP %d %s, want 502 with the login hint", code, body)
	}
	if n := len(e.mock.Requests()) + e.mock.Unauthorized(); n != requests || e.is.Calls() != 0 {
		t.Errorf("a message after logout reached the model (%d) or the endpoint (%d)", n-requests, e.is.Calls())
	}
	if st := e.tokenStatus(d); st.State != codexauth.StateGone || !strings.Contains(st.LastError, "removed") {
		t.Errorf("status %+v, want login_gone: auth.json removed", st)
	}
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.codexHome, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	if r := c.send("x", "logged in again"); r.Status != "completed" {
		t.Errorf("after a new login: %+v", r)
	}
	d.stop(stopTimeout)
}

// auth.json a symbolic link to a shared file (before: the daemon refused to start): the daemon
// starts, refreshes through the link, keeps it a link, and the shared file holds the live token.
func TestE2EChatGPTSymlinkedAuthFile(t *testing.T) {
	e := newTokenE2E(t, time.Hour)
	shared := filepath.Join(e.root, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(e.codexHome, codexauth.AuthFile)
	if err := os.Rename(link, filepath.Join(shared, codexauth.AuthFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(shared, codexauth.AuthFile), link); err != nil {
		t.Fatal(err)
	}
	d := e.start("--spares", "0")
	c := newLocalClient(t, d)
	c.send("x", "before")
	e.is.Revoke()
	if r := c.send("x", "after"); r.Status != "completed" {
		t.Fatalf("after the refresh: %+v", r)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("auth.json is no longer a link: %v", err)
	}
	if refresh, _ := e.authTokens(); refresh != e.is.LiveRefreshToken() || e.is.Calls() != 1 {
		t.Errorf("the shared file does not hold the live token (calls %d)", e.is.Calls())
	}
	d.stop(stopTimeout)
}
