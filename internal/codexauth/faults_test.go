//go:build linux

package codexauth_test

// The daemon's own login under the faults an unlucky production meets (issue 27): each test
// reproduces the fault against the real lock, a real full disk and a token endpoint that rotates
// and refuses reuse.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

// waitFor polls cond until it holds or the test's deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := ctxT(t)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// CODEX_HOME on a small tmpfs whose disk fills during the write-back: the rotated tokens stay
// the daemon's truth (the next refresh spends the new refresh token, never the spent one in the
// file), the failure is shown, and the write is retried once there is room.
func TestWriteBackOnFullDisk(t *testing.T) {
	e := newEnv(t)
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", home, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount a tmpfs as CODEX_HOME (the test runs as root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(home, syscall.MNT_DETACH) })
	e.home = home
	if err := e.is.WriteAuthFile(home); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	var mu sync.Mutex
	m := e.open(func(c *codexauth.Config) {
		c.OnRefresh = func(o string) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }
	})
	filler := filepath.Join(home, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = f.Write(make([]byte, 4096))
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	spent, _ := e.authTokens()

	stale := m.Login().AccessToken
	e.is.Revoke()
	l, err := m.Refresh(ctxT(t), stale)
	if err != nil || !e.is.Accepts(l.AccessToken) {
		t.Fatalf("refresh on a full disk: %v", err)
	}
	st := m.Status()
	if st.State != codexauth.StateValid || st.WriteBackError == "" {
		t.Errorf("status %+v, want valid with a write-back error", st)
	}
	if rt, _ := e.authTokens(); rt != spent {
		t.Fatalf("auth.json changed on a full disk?")
	}
	// The next refresh spends the live token the daemon holds, not the spent one in the file.
	e.is.Revoke()
	if _, err := m.Refresh(ctxT(t), l.AccessToken); err != nil {
		t.Fatalf("second refresh: %v", err)
	}
	if r := e.is.Reused(); r != 0 || e.is.Calls() != 2 {
		t.Fatalf("%d calls, %d with a spent token; want 2 and 0", e.is.Calls(), r)
	}
	// Room again: Run writes the held login back.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the write-back retried", func() bool { return m.Status().WriteBackError == "" })
	if rt, _ := e.authTokens(); rt != e.is.LiveRefreshToken() {
		t.Error("auth.json does not hold the live refresh token after the retry")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(outcomes, ","), codexauth.OutcomeWriteFailed) {
		t.Errorf("outcomes %v lack %s", outcomes, codexauth.OutcomeWriteFailed)
	}
}

// Another live process holds auth.lock: the refresh waits a bounded time, spends nothing, names
// the holder, and Close does not hang. Once the lock is free the refresh works.
func TestLockHeldByAnotherProcess(t *testing.T) {
	e := newEnv(t)
	// Who holds the lock is the daemon's /proc reader's to say (childproc.ProcFS.FlockHolder):
	// here a function that names the file it was asked about.
	var asked atomic.Value
	m := e.open(func(c *codexauth.Config) {
		c.LockWait = 200 * time.Millisecond
		c.LockHolder = func(dev, ino uint64) string {
			asked.Store([2]uint64{dev, ino})
			return "pid 42 (flock)"
		}
	})
	holder := exec.Command("flock", "-x", filepath.Join(e.home, codexauth.LockFile), "-c", "echo locked; read x || true")
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, _ := holder.StdinPipe()
	out, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("lock holder: %q %v", buf, err)
	}
	stale := m.Login().AccessToken
	e.is.Revoke()
	_, err := m.Refresh(ctxT(t), stale)
	var held *codexauth.LockHeldError
	if !errors.As(err, &held) || held.Holder != "pid 42 (flock)" {
		t.Fatalf("refresh with the lock held: %v, want a LockHeldError naming the holder LockHolder gave", err)
	}
	var lockSt syscall.Stat_t
	if err := syscall.Stat(filepath.Join(e.home, codexauth.LockFile), &lockSt); err != nil {
		t.Fatal(err)
	}
	if got, _ := asked.Load().([2]uint64); got != [2]uint64{lockSt.Dev, lockSt.Ino} {
		t.Errorf("LockHolder asked about %v, want auth.lock's device and inode %v", got, [2]uint64{lockSt.Dev, lockSt.Ino})
	}
	if e.is.Calls() != 0 {
		t.Errorf("%d token calls while another process held the lock", e.is.Calls())
	}
	if st := m.Status(); st.State != codexauth.StateFailing || !strings.Contains(st.LastError, "flock") {
		t.Errorf("status %+v", st)
	}
	stdin.Close()
	if err := holder.Wait(); err != nil {
		t.Fatal(err)
	}
	if l, err := m.Refresh(ctxT(t), stale); err != nil || !e.is.Accepts(l.AccessToken) {
		t.Fatalf("after the lock was freed: %v", err)
	}
}

// The endpoint rotates but answers late: the caller is answered in time with an error, the
// call is still awaited (the token never sent again), and the late answer becomes the login.
func TestLateAnswerIsAwaited(t *testing.T) {
	e := newEnv(t)
	m := e.open(func(c *codexauth.Config) { c.RequestTimeout = 100 * time.Millisecond })
	stale := m.Login().AccessToken
	e.is.Revoke()
	e.is.SetFault(codexauthtest.FaultLate)
	for i := range 3 {
		if _, err := m.Refresh(ctxT(t), stale); err == nil || errors.Is(err, codexauth.ErrLoginGone) {
			t.Fatalf("ask %d before the late answer: %v", i, err)
		}
	}
	if e.is.Calls() != 1 {
		t.Fatalf("%d token calls before the answer, want 1", e.is.Calls())
	}
	e.is.Release()
	if err := m.WaitIdle(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if l := m.Login(); !e.is.Accepts(l.AccessToken) || e.is.Reused() != 0 {
		t.Errorf("after the late answer: accepted %v, reused %d", e.is.Accepts(l.AccessToken), e.is.Reused())
	}
	if st := m.Status(); st.State != codexauth.StateValid {
		t.Errorf("status %+v", st)
	}
}

// Two daemons on one CODEX_HOME meet a refused token together: the lock held across the call
// makes one refresh; the other adopts what it wrote.
func TestTwoManagersOneHome(t *testing.T) {
	e := newEnv(t)
	a, b := e.open(nil), e.open(nil)
	stale := a.Login().AccessToken
	e.is.Revoke()
	var wg sync.WaitGroup
	for _, m := range []*codexauth.Manager{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := m.Refresh(ctxT(t), stale); err != nil || !e.is.Accepts(l.AccessToken) {
				t.Errorf("refresh: %v", err)
			}
		}()
	}
	wg.Wait()
	if e.is.Calls() != 1 || e.is.Reused() != 0 {
		t.Errorf("%d calls, %d reused; want 1 and 0", e.is.Calls(), e.is.Reused())
	}
}

// `codex logout` removes auth.json: the daemon stops using and refreshing the login at once, and
// a new login brings it back.
func TestLogoutEndsTheLogin(t *testing.T) {
	e := newEnv(t)
	m := e.open(nil)
	if err := os.Remove(filepath.Join(e.home, codexauth.AuthFile)); err != nil {
		t.Fatal(err)
	}
	if err := m.Usable(); !errors.Is(err, codexauth.ErrLoginGone) {
		t.Fatalf("after logout: %v, want ErrLoginGone", err)
	}
	if _, err := m.Refresh(ctxT(t), m.Login().AccessToken); err == nil || e.is.Calls() != 0 {
		t.Fatalf("refresh after logout: %v, %d calls", err, e.is.Calls())
	}
	access, refresh := e.is.RotateElsewhere()
	if err := codexauthtest.WriteAuthFile(e.home, e.is.IDToken(), access, refresh, "acct-test"); err != nil {
		t.Fatal(err)
	}
	if err := m.Usable(); err != nil || m.Login().AccessToken != access {
		t.Fatalf("after a new login: %v", err)
	}
}

// auth.json readable by others gets a warning.
func TestWorldReadableAuthFileWarned(t *testing.T) {
	e := newEnv(t)
	if err := os.Chmod(filepath.Join(e.home, codexauth.AuthFile), 0o644); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	e.open(func(c *codexauth.Config) { c.Logger = zap.New(core) })
	if logs.FilterMessageSnippet("readable by other users").Len() != 1 {
		t.Errorf("no warning for a 0644 auth.json: %v", logs.All())
	}
}

// authTokens reads the refresh and access tokens of auth.json.
func (e *env) authTokens() (refresh, access string) {
	e.t.Helper()
	doc := e.authFile()
	tok, _ := doc["tokens"].(map[string]any)
	refresh, _ = tok["refresh_token"].(string)
	access, _ = tok["access_token"].(string)
	return refresh, access
}

// auth.json a symbolic link to a shared file: the login is read through it, the rotated tokens
// are written to the file it points to (the link stays a link), and the lock beside that file is
// held too.
func TestSymlinkedAuthFileFollowed(t *testing.T) {
	e := newEnv(t)
	shared := t.TempDir()
	if err := os.Rename(filepath.Join(e.home, codexauth.AuthFile), filepath.Join(shared, codexauth.AuthFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(shared, codexauth.AuthFile), filepath.Join(e.home, codexauth.AuthFile)); err != nil {
		t.Fatal(err)
	}
	m := e.open(nil)
	stale := m.Login().AccessToken
	e.is.Revoke()
	if _, err := m.Refresh(ctxT(t), stale); err != nil {
		t.Fatalf("refresh through the link: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(e.home, codexauth.AuthFile)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("auth.json is no longer a link: %v", err)
	}
	if rt, _ := e.authTokens(); rt != e.is.LiveRefreshToken() {
		t.Error("the shared file does not hold the live refresh token")
	}
	if _, err := os.Stat(filepath.Join(shared, codexauth.AuthFile+".lock")); err != nil {
		t.Errorf("no lock beside the shared file: %v", err)
	}
}
