//go:build linux

package main

// supervisor doctor runs as a real process (this test binary in helper-process mode) with an
// environment the test controls: a pass, and each check failing on its own.

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/appserver/appservertest"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/codexversion"
	"github.com/molecule-ai/codex-warm/internal/exectest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// doctorEnv is one machine as doctor sees it: a codex, a CODEX_HOME on the mock model (logged
// in by its provider's own credentials), a 0700 state dir, a bwrap in PATH.
type doctorEnv struct {
	t         *testing.T
	codexBin  string
	root      string
	codexHome string
	stateDir  string
	binDir    string // first in PATH
	env       []string
	args      []string
	cred      *syscall.Credential
	self      string // the doctor binary (the test binary)
	// codexVersion is what the codex under test says it is; codexWhere where that stands
	// against the tested range (codexRange). Outside it doctor warns on its version line,
	// which the checks of other lines then let pass.
	codexVersion string
	codexWhere   int
}

func newDoctorEnv(t *testing.T) *doctorEnv {
	t.Helper()
	mock, err := mockmodel.New(mockmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	// Short: the state dir's control socket path must fit a unix socket address.
	root, err := os.MkdirTemp("", "cwdoc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	e := &doctorEnv{t: t, codexBin: appservertest.CodexBin(t), root: root, self: os.Args[0],
		codexHome: filepath.Join(root, "codex-home"), stateDir: filepath.Join(root, "state"), binDir: filepath.Join(root, "bin")}
	for _, d := range []string{e.codexHome, e.stateDir, e.binDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := mock.WriteCodexHome(e.codexHome); err != nil {
		t.Fatal(err)
	}
	e.script("bwrap", "#!/bin/sh\nexit 0\n")
	e.env = []string{daemonEnv + "=1", "GORACE=atexit_sleep_ms=0", "HOME=" + root,
		"PATH=" + e.binDir + ":/usr/bin:/bin", "CODEX_HOME=" + e.codexHome}
	e.args = []string{"--codex-bin", e.codexBin, "--state-dir", e.stateDir, "--inbox", "local", "--listen", "127.0.0.1:0"}
	e.codexVersion, e.codexWhere = codexUnderTest(t, e.codexBin)
	return e
}

// codexVersionLine is the start of doctor's version line for codex v standing at where.
func codexVersionLine(v string, where int) string {
	switch {
	case where < 0:
		return "codex-cli " + v + " is older than the versions this release is tested with"
	case where > 0:
		return "codex-cli " + v + " is newer than the versions this release is tested with"
	}
	return "codex-cli " + v + ", within the versions this release is tested with (" + codexversion.Oldest + " to " + codexversion.Newest + ")"
}

// codexUnderTest returns the version of the codex binary bin (the one under test: `make test
// CODEX_VERSION=X` tests X) and where it stands against the tested range.
func codexUnderTest(t *testing.T, bin string) (version string, where int) {
	t.Helper()
	v, err := appserver.Version(t.Context(), bin, nil)
	if err != nil {
		t.Fatal(err)
	}
	where, err = codexversion.Range(v)
	if err != nil {
		t.Fatal(err)
	}
	return v, where
}

// script writes an executable script into the PATH directory.
func (e *doctorEnv) script(name, body string) string {
	e.t.Helper()
	p := filepath.Join(e.binDir, name)
	if err := exectest.WriteExecutable(p, []byte(body), 0o755); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// doctorRun is the outcome of one doctor run.
type doctorRun struct {
	code int
	out  string
	// versionWarns is set when the codex under test lies outside the tested range: its
	// version line then warns, as it should, whatever else a test checks.
	versionWarns bool
}

// line returns the mark and the text of the check's line.
func (r doctorRun) line(name string) (mark, text string) {
	for _, l := range strings.Split(r.out, "\n") {
		m, rest, ok := strings.Cut(l, " ")
		if ok && strings.HasPrefix(rest, name+" ") && strings.ContainsAny(m, "✓✗!-") {
			return m, rest
		}
	}
	return "", ""
}

func (e *doctorEnv) run(extra ...string) doctorRun {
	e.t.Helper()
	cmd := exec.Command(e.self, append(append([]string{"doctor"}, e.args...), extra...)...)
	cmd.Env = e.env
	cmd.Dir = e.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r := doctorRun{out: out.String(), versionWarns: e.codexWhere != 0}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("doctor: %v\n%s", err, r.out)
	}
	return r
}

// npmArchName and targetTripleName name the npm package and folder of this machine's native
// codex, as the npm layout does.
func npmArchName() string {
	if runtime.GOARCH == "amd64" {
		return "x64"
	}
	return runtime.GOARCH
}

func targetTripleName() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-unknown-linux-musl"
	}
	return "x86_64-unknown-linux-musl"
}

// expect fails unless the run has exit code code, the check name's line has mark and contains
// every want, and every other check passed or did not apply.
func (r doctorRun) expect(t *testing.T, code int, name, mark string, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d", r.code, code)
	}
	m, text := r.line(name)
	if m != mark {
		t.Errorf("%s: mark %q, want %q", name, m, mark)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s: %q lacks %q", name, text, w)
		}
	}
	for _, l := range strings.Split(r.out, "\n") {
		rest := l[strings.Index(l, " ")+1:]
		if r.versionWarns && strings.HasPrefix(l, "! codex version ") {
			continue
		}
		if (strings.HasPrefix(l, "✗ ") || strings.HasPrefix(l, "! ")) && !strings.HasPrefix(rest, name+" ") {
			t.Errorf("another check did not pass: %s", l)
		}
	}
	if t.Failed() {
		t.Logf("doctor output:\n%s", r.out)
	}
}

// Everything in place: every check passes or does not apply, exit 0, and the lines say what
// was found (the binary, the tested version, the mock provider's own credentials).
func TestDoctorPasses(t *testing.T) {
	t.Parallel()
	e := newDoctorEnv(t)
	r := e.run()
	r.expect(t, 0, "codex login", "✓", `no login needed: model provider "mock"`)
	for name, want := range map[string]string{
		"codex binary":  e.codexBin + ": native binary, from --codex-bin",
		"codex version": codexVersionLine(e.codexVersion, e.codexWhere),
		"CODEX_HOME":    e.codexHome + ` (from CODEX_HOME); ` + filepath.Join(e.codexHome, "config.toml") + `: model "mock-model", model provider "mock"`,
		"bubblewrap":    filepath.Join(e.binDir, "bwrap"),
		"state dir":     e.stateDir + " (mode 0700, writable)",
		"sessions.json": "none yet",
		"listen":        "127.0.0.1:0: loopback; run picks a free port",
		"disk":          "free of",
		"molecule env":  "not used (--inbox local)",
		"memory":        "MemAvailable",
	} {
		if _, text := r.line(name); !strings.Contains(text, want) {
			t.Errorf("%s: %q lacks %q", name, text, want)
		}
	}
}

// The canonical variables alone (MOLECULE_API_URL, MOLECULE_WORKSPACE_ID) select the Molecule
// inbox and reach the platform.
func TestDoctorCanonicalVariables(t *testing.T) {
	t.Parallel()
	e := newDoctorEnv(t)
	p := moleculetest.NewPlatform(t, moleculetest.Config{OrgID: "org-uuid-1"})
	e.env = append(e.env, "MOLECULE_API_URL="+p.URL(), "MOLECULE_WORKSPACE_ID="+p.WorkspaceID(),
		"MOLECULE_WORKSPACE_TOKEN="+p.Token(), "MOLECULE_ORG_ID=org-uuid-1")
	e.args = []string{"--codex-bin", e.codexBin, "--state-dir", e.stateDir}
	r := e.run()
	r.expect(t, 0, "platform", "✓", "accepts the token and workspace")
	if _, text := r.line("molecule env"); !strings.Contains(text, "MOLECULE_API_URL "+p.URL()) || !strings.Contains(text, "MOLECULE_WORKSPACE_ID "+p.WorkspaceID()) ||
		!strings.Contains(text, "MOLECULE_ORG_ID org-uuid-1") {
		t.Errorf("molecule env: %q", text)
	}
}

// Molecule mode against the fake platform: the platform answers and accepts the token, and
// doctor changed nothing there (one GET of the activity feed, no register).
func TestDoctorPassesMolecule(t *testing.T) {
	t.Parallel()
	e := newDoctorEnv(t)
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	e.env = append(e.env, "PLATFORM_URL="+p.URL(), "WORKSPACE_ID="+p.WorkspaceID(), "MOLECULE_WORKSPACE_TOKEN="+p.Token())
	e.args = []string{"--codex-bin", e.codexBin, "--state-dir", e.stateDir}
	r := e.run()
	r.expect(t, 0, "platform", "✓", "accepts the token and workspace")
	if _, text := r.line("molecule env"); !strings.Contains(text, "PLATFORM_URL "+p.URL()) || !strings.Contains(text, "MOLECULE_ORG_ID not set") {
		t.Errorf("molecule env: %q", text)
	}
	if _, text := r.line("listen"); !strings.Contains(text, "not used (--inbox molecule)") {
		t.Errorf("listen: %q", text)
	}
	r.expect(t, 0, "event stream", "✓", "offered")
	// One read of the activity feed, one of the secrets (whose login it is) and one connect to
	// the event stream: nothing written.
	if calls := p.Calls(); len(calls) != 3 || p.CountCalls(moleculetest.RouteActivity, 200) != 1 ||
		p.CountCalls(moleculetest.RouteSecrets, 200) != 1 || p.CountCalls(moleculetest.RouteEvents, 200) != 1 {
		t.Errorf("platform calls %+v, want one activity read, one secrets read and one stream connect", calls)
	}
	// A platform without the stream is a warning: messages wait for the poll.
	p.SetEventStream(false)
	if r := e.run(); !strings.Contains(r.out, "the platform offers none") {
		t.Errorf("doctor on a platform without the stream:\n%s", r.out)
	}
	if strings.Contains(r.out, p.Token()) {
		t.Error("doctor printed the token")
	}
}

// Each check failing on its own: exit 1 (warnings: 0), the check's line marked, with the fix.
func TestDoctorFailures(t *testing.T) {
	t.Parallel()
	t.Run("no codex", func(t *testing.T) {
		e := newDoctorEnv(t)
		r := e.run("--codex-bin=")
		r.expect(t, 1, "codex binary", "✗", "none in PATH", "--codex-bin", "CODEX_BIN", "make -s codex-bin")
	})
	t.Run("not the codex CLI", func(t *testing.T) {
		e := newDoctorEnv(t)
		fake := e.script("codex", "#!/bin/sh\necho hello\n")
		r := e.run("--codex-bin", fake)
		r.expect(t, 1, "codex version", "✗", fake, "is not the codex CLI", "fix: point --codex-bin")
	})
	t.Run("npm wrapper and another version", func(t *testing.T) {
		e := newDoctorEnv(t)
		// The npm layout: the node wrapper and, beside it, the platform package's native binary
		// (here a script that says it is another codex release and cannot serve).
		pkg := filepath.Join(e.root, "npm", "node_modules", "@openai", "codex")
		native := filepath.Join(e.root, "npm", "node_modules", "@openai", "codex-linux-"+npmArchName(), "vendor", targetTripleName(), "bin", "codex")
		for _, d := range []string{filepath.Join(pkg, "bin"), filepath.Dir(native)} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		wrapper := filepath.Join(pkg, "bin", "codex.js")
		if err := exectest.WriteExecutable(wrapper, []byte("#!/usr/bin/env node\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := exectest.WriteExecutable(native, []byte("#!/bin/sh\necho codex-cli 0.1.0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := e.run("--codex-bin", wrapper)
		if m, text := r.line("codex binary"); m != "✓" || !strings.Contains(text, native) || !strings.Contains(text, "npm node wrapper "+wrapper) {
			t.Errorf("codex binary: %s %s", m, text)
		}
		if m, text := r.line("codex version"); m != "!" || !strings.Contains(text, "codex-cli 0.1.0 is older than the versions this release is tested with ("+codexversion.Oldest+" to "+codexversion.Newest+")") {
			t.Errorf("codex version: %s %s", m, text)
		}
		if m, text := r.line("codex login"); m != "✗" || !strings.Contains(text, "could not ask codex") {
			t.Errorf("codex login (a fake that cannot serve): %s %s", m, text)
		}
		if r.code != 1 {
			t.Errorf("exit %d; output:\n%s", r.code, r.out)
		}
	})
	t.Run("not logged in", func(t *testing.T) {
		e := newDoctorEnv(t)
		empty := filepath.Join(e.root, "empty-codex-home")
		if err := os.Mkdir(empty, 0o700); err != nil {
			t.Fatal(err)
		}
		e.env = append(e.env, "CODEX_HOME="+empty)
		r := e.run()
		r.expect(t, 1, "codex login", "✗", "not logged in", "fix: as the daemon's user, run `CODEX_HOME="+empty+" "+e.codexBin+" login`")
	})
	t.Run("model endpoint unreachable", func(t *testing.T) {
		e := newDoctorEnv(t)
		home := filepath.Join(e.root, "refused-codex-home")
		if err := os.Mkdir(home, 0o700); err != nil {
			t.Fatal(err)
		}
		// A provider whose base_url refuses connections, as a wrong base_url or an outage does.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		conf := "model = \"m\"\nmodel_provider = \"gone\"\n[model_providers.gone]\nname = \"gone\"\nbase_url = \"http://" + addr + "/v1\"\nwire_api = \"responses\"\n"
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		e.env = append(e.env, "CODEX_HOME="+home)
		r := e.run()
		r.expect(t, 1, "model endpoint", "✗", `model provider "gone" at http://`+addr+"/v1 cannot be reached", "connection refused", "fix: check the provider's base_url")
	})
	t.Run("CODEX_HOME missing", func(t *testing.T) {
		e := newDoctorEnv(t)
		gone := filepath.Join(e.root, "no-such-home")
		e.env = append(e.env, "CODEX_HOME="+gone)
		r := e.run()
		r.expect(t, 1, "CODEX_HOME", "✗", gone+" (from CODEX_HOME) does not exist", "mkdir -m 700 "+gone)
	})
	t.Run("state dir not writable", func(t *testing.T) {
		e := newDoctorEnv(t)
		if os.Getuid() == 0 {
			// Root writes anywhere: run doctor as nobody, owning everything but the state dir.
			e.asNobody()
		}
		if err := os.Chmod(e.stateDir, 0o500); err != nil {
			t.Fatal(err)
		}
		r := e.run()
		r.expect(t, 1, "state dir", "✗", "is not writable", "chmod 700")
	})
	t.Run("state dir open to others", func(t *testing.T) {
		e := newDoctorEnv(t)
		if err := os.Chmod(e.stateDir, 0o755); err != nil {
			t.Fatal(err)
		}
		r := e.run()
		r.expect(t, 0, "state dir", "!", "mode 0755", "other users", "fix: chmod 700 "+e.stateDir)
	})
	t.Run("sessions.json corrupt", func(t *testing.T) {
		e := newDoctorEnv(t)
		if err := os.WriteFile(filepath.Join(e.stateDir, "sessions.json"), []byte(`{"peer:a": `), 0o600); err != nil {
			t.Fatal(err)
		}
		r := e.run()
		r.expect(t, 1, "sessions.json", "✗", "corrupt", "would move it aside")
		if b, _ := os.ReadFile(filepath.Join(e.stateDir, "sessions.json")); string(b) != `{"peer:a": ` {
			t.Errorf("doctor changed sessions.json to %q", b)
		}
	})
	t.Run("listen address in use", func(t *testing.T) {
		e := newDoctorEnv(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		r := e.run("--listen", ln.Addr().String())
		r.expect(t, 1, "listen", "✗", "in use by another process")
	})
	t.Run("listen beyond loopback without token", func(t *testing.T) {
		e := newDoctorEnv(t)
		r := e.run("--listen", "0.0.0.0:8377")
		r.expect(t, 1, "listen", "✗", "reachable from other machines without a token", "fix: --listen 127.0.0.1:PORT, or set CODEX_WARM_INBOX_TOKEN")
	})
	t.Run("molecule env incomplete", func(t *testing.T) {
		e := newDoctorEnv(t)
		e.env = append(e.env, "PLATFORM_URL=http://127.0.0.1:9", "CONFIGS_DIR="+e.root)
		r := e.run("--inbox", "molecule")
		r.expect(t, 1, "molecule env", "✗", "MOLECULE_WORKSPACE_ID (or WORKSPACE_ID) is not set",
			"fix: set MOLECULE_API_URL (or PLATFORM_URL), MOLECULE_WORKSPACE_ID (or WORKSPACE_ID) and MOLECULE_WORKSPACE_TOKEN")
	})
	// A SaaS tenant's guard refuses the read without X-Molecule-Org-Id: doctor names
	// MOLECULE_ORG_ID, not the network path.
	t.Run("tenant guard without MOLECULE_ORG_ID", func(t *testing.T) {
		e := newDoctorEnv(t)
		p := moleculetest.NewPlatform(t, moleculetest.Config{OrgID: "org-uuid-1"})
		e.env = append(e.env, "MOLECULE_API_URL="+p.URL(), "MOLECULE_WORKSPACE_ID="+p.WorkspaceID(), "MOLECULE_WORKSPACE_TOKEN="+p.Token())
		r := e.run("--inbox", "molecule")
		r.expect(t, 1, "platform", "✗", "HTTP 400", "TENANT_ORG_HEADER_REQUIRED", "MOLECULE_ORG_ID is not set", "fix: set MOLECULE_ORG_ID")
		if strings.Contains(r.out, "network path") {
			t.Error("doctor blames the network path for the tenant guard")
		}
	})
	t.Run("wrong MOLECULE_ORG_ID", func(t *testing.T) {
		e := newDoctorEnv(t)
		p := moleculetest.NewPlatform(t, moleculetest.Config{OrgID: "org-uuid-1"})
		e.env = append(e.env, "MOLECULE_API_URL="+p.URL(), "MOLECULE_WORKSPACE_ID="+p.WorkspaceID(), "MOLECULE_WORKSPACE_TOKEN="+p.Token(), "MOLECULE_ORG_ID=org-other")
		r := e.run("--inbox", "molecule")
		r.expect(t, 1, "platform", "✗", "HTTP 404", "MOLECULE_ORG_ID is not this tenant's organization", "fix: check MOLECULE_WORKSPACE_ID and MOLECULE_ORG_ID")
	})
	t.Run("platform refuses the token", func(t *testing.T) {
		e := newDoctorEnv(t)
		p := moleculetest.NewPlatform(t, moleculetest.Config{})
		e.env = append(e.env, "PLATFORM_URL="+p.URL(), "WORKSPACE_ID="+p.WorkspaceID(), "MOLECULE_WORKSPACE_TOKEN=wrong-token")
		r := e.run("--inbox", "molecule")
		r.expect(t, 1, "platform", "✗", "HTTP 401", "the token was refused", "fix: check MOLECULE_WORKSPACE_TOKEN")
	})
	t.Run("platform unreachable", func(t *testing.T) {
		e := newDoctorEnv(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + ln.Addr().String()
		ln.Close()
		e.env = append(e.env, "PLATFORM_URL="+dead, "WORKSPACE_ID=ws", "MOLECULE_WORKSPACE_TOKEN=t")
		r := e.run("--inbox", "molecule")
		r.expect(t, 1, "platform", "✗", "not reachable", "fix: check PLATFORM_URL and the network path")
	})
	t.Run("no bubblewrap", func(t *testing.T) {
		e := newDoctorEnv(t)
		if err := os.Remove(filepath.Join(e.binDir, "bwrap")); err != nil {
			t.Fatal(err)
		}
		e.env = append(e.env, "PATH="+e.binDir)
		r := e.run()
		r.expect(t, 0, "bubblewrap", "!", "not in PATH", "fix: apt-get install bubblewrap")
	})
	t.Run("budget above MemAvailable", func(t *testing.T) {
		e := newDoctorEnv(t)
		r := e.run("--memory-budget", "64TiB")
		r.expect(t, 0, "memory", "!", "memory budget 65536.0G", "above MemAvailable", "fix: lower --memory-budget")
	})

}

// asNobody makes doctor run as nobody, with the test binary, the environment and codex where
// nobody can reach them.
func (e *doctorEnv) asNobody() {
	e.t.Helper()
	const nobody = 65534
	e.cred = &syscall.Credential{Uid: nobody, Gid: nobody}
	e.self = copyTestBinary(e.t)
	if err := os.Chmod(e.root, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := filepath.Walk(e.root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}); err != nil {
		e.t.Fatal(err)
	}
	// The pinned codex may sit under a directory only root can enter.
	bin := filepath.Join(e.binDir, "codex")
	data, err := os.ReadFile(e.codexBin)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := exectest.WriteExecutable(bin, data, 0o755); err != nil {
		e.t.Fatal(err)
	}
	e.codexBin = bin
	e.args[1] = bin
}

// doctor names where the codex it checked came from: the --codex-bin flag (which wins over the
// variable), the CODEX_BIN variable, the codex beside the supervisor executable, or PATH.
func TestDoctorNamesWhereCodexCameFrom(t *testing.T) {
	t.Parallel()
	withoutFlag := func(e *doctorEnv) {
		args := e.args[:0:0]
		for i := 0; i < len(e.args); i++ {
			if e.args[i] == "--codex-bin" {
				i++
				continue
			}
			args = append(args, e.args[i])
		}
		e.args = args
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *doctorEnv)
		want  string
	}{
		{"flag", func(*testing.T, *doctorEnv) {}, "from --codex-bin"},
		{"flag over the variable", func(_ *testing.T, e *doctorEnv) {
			e.env = append(e.env, "CODEX_BIN=/nonexistent/codex")
		}, "from --codex-bin"},
		{"variable", func(_ *testing.T, e *doctorEnv) {
			withoutFlag(e)
			e.env = append(e.env, "CODEX_BIN="+e.codexBin)
		}, "from CODEX_BIN"},
		{"PATH", func(t *testing.T, e *doctorEnv) {
			withoutFlag(e)
			if err := os.Symlink(e.codexBin, filepath.Join(e.binDir, "codex")); err != nil {
				t.Fatal(err)
			}
		}, "from PATH"},
		{"beside supervisor", func(t *testing.T, e *doctorEnv) {
			withoutFlag(e)
			// os.Executable resolves links, so the supervisor here is a hard link (or a copy) of
			// the test binary, with a codex beside it.
			dir := filepath.Join(e.root, "libexec")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			self := filepath.Join(dir, "supervisor")
			if err := os.Link(e.self, self); err != nil {
				copyFile(t, e.self, self)
			}
			e.self = self
			if err := os.Symlink(e.codexBin, filepath.Join(dir, "codex")); err != nil {
				t.Fatal(err)
			}
		}, "from beside supervisor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDoctorEnv(t)
			tc.setup(t, e)
			r := e.run()
			r.expect(t, 0, "codex binary", "✓", tc.want)
		})
	}
}

// copyFile copies an executable file.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := exectest.WriteExecutable(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
