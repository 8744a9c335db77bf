package doctor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/control"
)

// baseConfig is a local-inbox configuration on a fresh state directory and CODEX_HOME, whose
// steps fail the test when a check runs one it was not meant to.
func baseConfig(t *testing.T) Config {
	t.Helper()
	home, state := t.TempDir(), t.TempDir()
	if err := os.Chmod(state, 0o700); err != nil {
		t.Fatal(err)
	}
	unexpected := func(step string) { t.Errorf("the checks ran the step %s", step) }
	return Config{
		Inbox: "local", StateDir: state, Listen: "127.0.0.1:0", WorkDir: t.TempDir(),
		Env: []string{"CODEX_HOME=" + home}, Getenv: func(string) string { return "" },
		PlatformTimeout: 5 * time.Second, MaxChildren: 4, MemoryBudget: -1,
		NoCodexHint: "install codex beside supervisor",
		Steps: Steps{
			FindCodex: func() (Codex, error) { unexpected("FindCodex"); return Codex{}, errors.New("unexpected") },
			ProbeCodex: func(context.Context, appserver.Config, func(context.Context, *appserver.Client)) control.CodexAuth {
				unexpected("ProbeCodex")
				return control.CodexAuth{State: control.CodexAuthUnknown}
			},
			PlanLogin: func(context.Context, string) (LoginPlan, error) {
				return LoginPlan{Owner: codexauth.OwnerDaemon, Why: "test"}, nil
			},
			ChildAccess: func(context.Context, string, string, string) []AccessProblem {
				unexpected("ChildAccess")
				return nil
			},
		},
	}
}

func find(t *testing.T, results []Result, name string) Result {
	t.Helper()
	i := slices.IndexFunc(results, func(r Result) bool { return r.Name == name })
	if i < 0 {
		t.Fatalf("no %q line in %v", name, results)
	}
	return results[i]
}

func expect(t *testing.T, r Result, status Status, want ...string) {
	t.Helper()
	line := r.String()
	if r.Status != status {
		t.Errorf("%s: %s, want mark %s", r.Name, line, status.mark())
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("%s: %q lacks %q", r.Name, line, w)
		}
	}
}

// Without a codex, the codex line fails with the hint, and what needs codex is skipped rather
// than run: no app-server is started (ProbeCodex fails the test), and the lines that need no
// codex still run.
func TestRunWithoutCodex(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t)
	cfg.Steps.FindCodex = func() (Codex, error) {
		return Codex{From: "PATH"}, fmt.Errorf("find codex: %w", appserver.ErrNoCodex)
	}
	results := Run(context.Background(), cfg, nil)
	expect(t, find(t, results, "codex binary"), Fail, "none in PATH", "fix: install codex beside supervisor")
	expect(t, find(t, results, "codex version"), Skip, "no codex binary")
	expect(t, find(t, results, "codex login"), Skip, "codex cannot start")
	expect(t, find(t, results, "child user"), Skip, "no --child-user")
	expect(t, find(t, results, "state dir"), OK, cfg.StateDir, "writable")
	expect(t, find(t, results, "sessions.json"), OK, "none yet")
	expect(t, find(t, results, "listen"), OK, "picks a free port")
	expect(t, find(t, results, "molecule env"), Skip)
	expect(t, find(t, results, "running daemon's login"), Skip)
}

// fakeDaemon answers the status verb on dir's control socket with doc, as a running daemon
// does.
func fakeDaemon(t *testing.T, dir string, doc control.StatusDoc) {
	t.Helper()
	s := control.NewServer()
	control.Handle(s, control.VerbStatus, http.StatusOK, func(context.Context, control.Empty) (control.StatusDoc, error) { return doc, nil })
	ln, err := control.Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := s.HTTPServer(nil)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
}

// A daemon running on the state directory explains what would otherwise look like conflicts:
// its listen address is in use by it, not by a stranger; and what it says of the login it
// holds is a line of its own (a login it could not write back fails: it holds the only copy).
func TestRunningDaemonExplainsConflicts(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()

	cfg := baseConfig(t)
	cfg.Listen = addr
	d := &doctor{cfg: cfg, getenv: cfg.Getenv, env: cfg.Env}
	d.findRunningDaemon(context.Background())
	expect(t, d.checkListen(), Fail, addr+" is in use by another process")
	expect(t, d.checkRunningLogin(), Skip)

	fakeDaemon(t, cfg.StateDir, control.StatusDoc{Daemon: control.DaemonInfo{PID: 4242, Listen: addr, StateDir: cfg.StateDir,
		CodexAuth: &control.CodexAuth{State: control.CodexLoggedIn, Tokens: &codexauth.Status{Owner: codexauth.OwnerDaemon,
			State: codexauth.StateValid, WriteBackError: "write auth.json: no space left on device"}}}})
	d.findRunningDaemon(context.Background())
	expect(t, d.checkListen(), OK, "in use by the running daemon (pid 4242)")
	expect(t, d.checkStateDir(), OK, "a daemon runs on it (pid 4242)")
	expect(t, d.checkRunningLogin(), Fail, "pid 4242", "no space left on device", "do not restart the daemon")
}

// The platform line tells the platform's refusals apart, each with its fix, against the fake
// platform.
func TestMoleculeCheck(t *testing.T) {
	t.Parallel()
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	env := map[string]string{"MOLECULE_API_URL": p.URL(), "MOLECULE_WORKSPACE_ID": p.WorkspaceID(), "MOLECULE_WORKSPACE_TOKEN": p.Token(),
		"HOME": t.TempDir()}
	check := func() []Result {
		cfg := baseConfig(t)
		cfg.Inbox = "molecule"
		cfg.Getenv = func(k string) string { return env[k] }
		d := &doctor{cfg: cfg, getenv: cfg.Getenv, env: cfg.Env}
		return d.checkMolecule(context.Background())
	}
	r := check()
	expect(t, find(t, r, "molecule env"), OK, "MOLECULE_API_URL "+p.URL(), "MOLECULE_ORG_ID not set")
	expect(t, find(t, r, "platform"), OK, "accepts the token and workspace")

	env["MOLECULE_WORKSPACE_TOKEN"] = "not-the-token"
	expect(t, find(t, check(), "platform"), Fail, "HTTP 401", "the token was refused", "fix: check MOLECULE_WORKSPACE_TOKEN")

	env["MOLECULE_WORKSPACE_TOKEN"] = p.Token()
	p.SetOrgID("org-1")
	expect(t, find(t, check(), "platform"), Fail, "MOLECULE_ORG_ID is not set", "fix: set MOLECULE_ORG_ID")

	delete(env, "MOLECULE_API_URL")
	expect(t, find(t, check(), "molecule env"), Fail, "fix: set MOLECULE_API_URL")
}

// The child user's line is what the access step found: a problem that fails every message
// fails the line, the others warn; each with its fix.
func TestChildUserProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		problems []AccessProblem
		status   Status
		want     []string
	}{
		{nil, OK, []string{"codex (uid 65534) executes /bin/codex", "tried as that user"}},
		{[]AccessProblem{{What: "cannot write in the working directory", Fix: "chown it"}}, Warn,
			[]string{"cannot write in the working directory", "fix: chown it"}},
		{[]AccessProblem{{What: "cannot write in the working directory", Fix: "chown it"}, {What: "cannot run /bin/codex", Fix: "chmod o+x", Fatal: true}}, Fail,
			[]string{"cannot write in the working directory; cannot run /bin/codex: every message would fail", "fix: chown it; chmod o+x"}},
	} {
		cfg := baseConfig(t)
		cfg.ChildUser, cfg.Credential = "codex", &syscall.Credential{Uid: 65534, Gid: 65534}
		var asked []string
		cfg.Steps.ChildAccess = func(_ context.Context, bin, home, wd string) []AccessProblem {
			asked = []string{bin, home, wd}
			return tc.problems
		}
		d := &doctor{cfg: cfg, getenv: cfg.Getenv, env: cfg.Env, cred: cfg.Credential, codex: Codex{Bin: "/bin/codex"}}
		expect(t, d.checkChildUser(context.Background()), tc.status, tc.want...)
		if want := []string{"/bin/codex", strings.TrimPrefix(cfg.Env[0], "CODEX_HOME="), cfg.WorkDir}; !slices.Equal(asked, want) {
			t.Errorf("the access step was asked %q, want %q", asked, want)
		}
	}
}

// A conversation whose thread has no rollout under CODEX_HOME is named: it would start over.
func TestMissingThreads(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	const kept, archived = "0199aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee", "0199aaaa-bbbb-7ccc-8ddd-ffffffffffff"
	for path, id := range map[string]string{"sessions/2026/11/20": kept, "archived_sessions": archived} {
		dir := filepath.Join(home, path)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rollout-2026-11-20T10-00-00-"+id+".jsonl"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := missingThreads(home, map[string]string{"b": kept, "c": archived, "a": "0199aaaa-bbbb-7ccc-8ddd-000000000000", "d": "0199aaaa-bbbb-7ccc-8ddd-111111111111"})
	if want := []string{"a", "d"}; !slices.Equal(got, want) {
		t.Errorf("missingThreads = %q, want %q", got, want)
	}
}
