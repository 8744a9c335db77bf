package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = ".."

// requireTool returns the path of a tool the test needs. Where it is missing the test fails
// when CODEX_WARM_REQUIRE_CODEX=1 (make test installs every tool first: make's target is named
// in the message), and is skipped with that message otherwise.
func requireTool(t *testing.T, name, target string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " not found; `make " + target + "` installs it"
	if os.Getenv("CODEX_WARM_REQUIRE_CODEX") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// makeVar reads a variable's value from the Makefile (NAME ?= value).
func makeVar(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\s*\??=\s*(\S+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("Makefile sets no %s", name)
	}
	return string(m[1])
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// stdoutOf is run for a command whose answer is its stdout: codex warns on stderr, for one when
// its CODEX_HOME lies under /tmp ("Refusing to create helper binaries under temporary dir"), and
// a warning is not part of `codex --version`. HOME is a fresh directory under the temp dir, so
// that warning is always there: the checks hold wherever the caller's HOME lies.
func stdoutOf(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "CODEX_HOME=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// `make install DESTDIR=…` stages supervisor and the codex under test (`make test
// CODEX_VERSION=X` tests X; the pin by default) side by side in PREFIX/libexec/codex-warm,
// links PREFIX/bin/supervisor to it, and the installed supervisor finds that codex by itself
// (doctor says so). `make uninstall` takes it all away again.
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	requireTool(t, "make", "test")
	// The version comes from the binary, never from a literal: whichever codex the suite runs
	// is the one make installs.
	underTest := strings.TrimSpace(stdoutOf(t, repoRoot, appservertest.CodexBin(t), "--version"))
	dest := t.TempDir()
	run(t, repoRoot, nil, "make", "-s", "install", "DESTDIR="+dest, "CODEX_VERSION="+strings.TrimPrefix(underTest, "codex-cli "))
	libexec := filepath.Join(dest, "usr/local/libexec/codex-warm")
	for _, f := range []string{"supervisor", "codex"} {
		fi, err := os.Stat(filepath.Join(libexec, f))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %v %v, want a 0755 file", f, fi, err)
		}
	}
	link := filepath.Join(dest, "usr/local/bin/supervisor")
	if target, err := os.Readlink(link); err != nil || target != "../libexec/codex-warm/supervisor" {
		t.Fatalf("bin/supervisor: link to %q (%v), want ../libexec/codex-warm/supervisor", target, err)
	}
	version := stdoutOf(t, dest, filepath.Join(libexec, "codex"), "--version")
	if want := underTest; strings.TrimSpace(version) != want {
		t.Errorf("installed codex says %q, want %q", version, want)
	}

	// The installed daemon, started through the link, with nothing telling it where codex is.
	cmd := exec.Command(link, "doctor", "--state-dir", filepath.Join(t.TempDir(), "state"), "--inbox", "local", "--listen", "127.0.0.1:0")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	out, _ := cmd.CombinedOutput()
	want := "✓ codex binary   " + filepath.Join(libexec, "codex") + ": native binary, from beside supervisor"
	if !strings.Contains(string(out), want) {
		t.Errorf("doctor of the installed supervisor lacks %q:\n%s", want, out)
	}

	run(t, repoRoot, nil, "make", "-s", "uninstall", "DESTDIR="+dest)
	var left []string
	_ = filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("uninstall left %v", left)
	}
}

// The systemd unit passes `systemd-analyze verify` without a single complaint (verify exits 0
// on unknown keys and bad values; it only prints them), and `systemd-analyze security` rates its
// exposure 5.0 or lower. Both run offline against a root holding the unit, systemd's own units
// and an executable where ExecStart points.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	sa := requireTool(t, "systemd-analyze", "systemd-analyze")
	root := t.TempDir()
	unit, err := os.ReadFile("systemd/supervisor.service")
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel string, data []byte, mode os.FileMode) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/systemd/system/codex-warm.service", unit, 0o644)
	exec := regexp.MustCompile(`(?m)^ExecStart=(\S+)`).FindSubmatch(unit)
	if exec == nil {
		t.Fatal("the unit has no ExecStart")
	}
	write(string(exec[1]), []byte("#!/bin/sh\n"), 0o755)
	// systemd's own units (sysinit.target, ...), which verify loads the unit's dependencies from.
	sysUnits := "/usr/lib/systemd/system"
	if err := os.CopyFS(filepath.Join(root, sysUnits), os.DirFS(sysUnits)); err != nil {
		t.Fatalf("copy %s: %v", sysUnits, err)
	}

	cmd := execCommand(sa, "verify", "--root="+root, "codex-warm.service")
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	cmd = execCommand(sa, "security", "--offline=true", "--threshold=50", "--no-pager", "--root="+root, "codex-warm.service")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 5.0 (%v):\n%s", err, out)
	}
	if m := regexp.MustCompile(`Overall exposure level for codex-warm.service: (\S+)`).FindSubmatch(out); m == nil {
		t.Errorf("no exposure level in:\n%s", out)
	} else {
		t.Logf("exposure %s", m[1])
	}

	for _, want := range []string{"KillMode=mixed", "NoNewPrivileges=yes", "ProtectSystem=strict", "Restart=on-failure",
		"StateDirectory=codex-warm codex-warm/state codex-warm/codex-home codex-warm/workspace", "User=codex-warm",
		// A reload runs the installed binary's reload command, which reports the outcome.
		"ExecReload=" + string(exec[1]) + " reload"} {
		if !bytes.Contains(unit, []byte("\n"+want+"\n")) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	// The stop timeout must leave the daemon its drain (30 s by default) and time to reap.
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the unit sets no TimeoutStopSec in seconds")
	}
	if n, _ := strconv.Atoi(string(m[1])); n <= 30 {
		t.Errorf("TimeoutStopSec=%d, want above the 30 s drain", n)
	}
	env, err := os.ReadFile("systemd/supervisor.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"PLATFORM_URL=", "WORKSPACE_ID=", "MOLECULE_WORKSPACE_TOKEN=", "#MOLECULE_ORG_ID=", "#CONFIGS_DIR="} {
		if !bytes.Contains(env, []byte("\n"+v)) {
			t.Errorf("supervisor.env.example lacks %s", v)
		}
	}
}

func execCommand(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
	return cmd
}

// stage is one FROM ... section of a Dockerfile.
type stage struct {
	name, from string
	// args are the stage's ARG defaults (a bare ARG takes the global default).
	args map[string]string
	// nodes are the stage's instructions after FROM.
	nodes []instruction
}

// instruction is one Dockerfile instruction: its name in upper case, its --flags, and its
// arguments: a JSON (exec) form's elements, a shell form's whole command for RUN, CMD and
// ENTRYPOINT (HEALTHCHECK's after its CMD word), the words of any other.
type instruction struct {
	name  string
	flags []string
	args  []string
}

// parseDockerfile reads a Dockerfile as the builder does for what these tests look at: comment
// and blank lines dropped (inside a continued instruction too), lines ending in a backslash
// continued, a leading run of --flags, and the exec form's JSON array. A test needs no more, and
// a full parser (buildkit's) pulled a large module graph into go.mod for it.
func parseDockerfile(text string) ([]instruction, error) {
	var out []instruction
	var cur strings.Builder
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if more, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(more + " ")
			continue
		}
		cur.WriteString(trimmed)
		in, err := parseInstruction(cur.String())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, in)
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, errors.New("the last instruction ends in a continuation")
	}
	return out, nil
}

// parseInstruction parses one logical line.
func parseInstruction(line string) (instruction, error) {
	name, rest, _ := strings.Cut(line, " ")
	in := instruction{name: strings.ToUpper(name)}
	rest = strings.TrimSpace(rest)
	for strings.HasPrefix(rest, "--") {
		flag, after, _ := strings.Cut(rest, " ")
		in.flags = append(in.flags, flag)
		rest = strings.TrimSpace(after)
	}
	if in.name == "HEALTHCHECK" {
		word, after, _ := strings.Cut(rest, " ")
		in.args = append(in.args, word)
		rest = strings.TrimSpace(after)
	}
	switch {
	case strings.HasPrefix(rest, "["):
		var elems []string
		if err := json.Unmarshal([]byte(rest), &elems); err != nil {
			return in, fmt.Errorf("%s: exec form %s: %w", in.name, rest, err)
		}
		in.args = append(in.args, elems...)
	case in.name == "RUN" || in.name == "CMD" || in.name == "ENTRYPOINT" || in.name == "HEALTHCHECK":
		in.args = append(in.args, rest)
	default:
		in.args = append(in.args, strings.Fields(rest)...)
	}
	return in, nil
}

// dockerfile parses the Dockerfile: the global ARG defaults and the stages.
func dockerfile(t *testing.T) (map[string]string, []stage) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	instrs, err := parseDockerfile(string(b))
	if err != nil {
		t.Fatalf("parse Dockerfile: %v", err)
	}
	global := map[string]string{}
	var stages []stage
	for _, n := range instrs {
		switch {
		case n.name == "FROM":
			s := stage{from: n.args[0], args: map[string]string{}}
			if len(n.args) == 3 && strings.EqualFold(n.args[1], "AS") {
				s.name = n.args[2]
			}
			stages = append(stages, s)
		case n.name == "ARG":
			k, v, hasDefault := strings.Cut(n.args[0], "=")
			if !hasDefault {
				v = global[k]
			}
			if len(stages) == 0 {
				global[k] = v
			} else {
				stages[len(stages)-1].args[k] = v
			}
		case len(stages) > 0:
			stages[len(stages)-1].nodes = append(stages[len(stages)-1].nodes, n)
		}
	}
	return global, stages
}

// instr returns the stage's instructions named name (upper case).
func (s stage) instr(name string) []instruction {
	var out []instruction
	for _, n := range s.nodes {
		if n.name == name {
			out = append(out, n)
		}
	}
	return out
}

// words is an instruction's arguments.
func words(n instruction) []string { return n.args }

// The Dockerfile parses, builds in stages (Go, the codex npm package, a slim run time), pins the
// Makefile's codex version, and its run time has bubblewrap, a non-root user, the /state volume,
// SIGTERM as stop signal and a health check on the daemon's /healthz.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	global, stages := dockerfile(t)
	if len(stages) != 3 || stages[0].name != "build" || stages[1].name != "codex" || stages[2].name != "" {
		t.Fatalf("stages %+v, want build, codex and the run time", stages)
	}
	if !strings.HasPrefix(stages[0].from, "golang:") || !strings.HasPrefix(stages[1].from, "node:") || !strings.HasPrefix(stages[2].from, "debian:") {
		t.Errorf("bases %s, %s, %s", stages[0].from, stages[1].from, stages[2].from)
	}
	if got, want := global["CODEX_VERSION"], makeVar(t, "CODEX_VERSION"); got != want {
		t.Errorf("Dockerfile CODEX_VERSION %s, Makefile %s", got, want)
	}
	rt := stages[2]
	one := func(name string) []string {
		t.Helper()
		ns := rt.instr(name)
		if len(ns) != 1 {
			t.Fatalf("run time stage: %d %s instructions, want 1", len(ns), name)
		}
		return words(ns[0])
	}
	if u := one("USER"); u[0] == "root" || u[0] == "0" {
		t.Errorf("USER %s", u[0])
	}
	if v := one("VOLUME"); v[0] != "/state" {
		t.Errorf("VOLUME %v", v)
	}
	if s := one("STOPSIGNAL"); s[0] != "SIGTERM" {
		t.Errorf("STOPSIGNAL %v", s)
	}
	if h := one("HEALTHCHECK"); strings.Join(h, " ") != "CMD supervisor status --health" {
		t.Errorf("HEALTHCHECK %v", h)
	}
	var runs string
	for _, n := range rt.instr("RUN") {
		runs += n.args[0] + "\n"
	}
	if !regexp.MustCompile(`apt-get install [^\n]*\bbubblewrap\b`).MatchString(runs) || !strings.Contains(runs, "useradd --system") {
		t.Errorf("run time RUNs lack bubblewrap or the user:\n%s", runs)
	}
	copies := map[string]string{}
	for _, n := range rt.instr("COPY") {
		copies[strings.Join(n.flags, " ")] = strings.Join(words(n), " ")
	}
	if copies["--from=build"] != "/out/supervisor /usr/local/libexec/codex-warm/supervisor" ||
		copies["--from=codex"] != "/out/codex /usr/local/libexec/codex-warm/codex" {
		t.Errorf("run time COPYs %v: supervisor and codex side by side, as make install puts them", copies)
	}
}

// The commands of the build stages work on this machine: the Go stage's RUNs (in the repository,
// as after its COPY . .) and the codex stage's npm install, run with /bin/sh -c as docker
// would, their ARGs in the environment and the output paths moved into a temporary directory.
// What they leave is what the run time stage copies: a supervisor that runs and the pinned
// native codex. npm is told to prefer its cache (filled by `make codex`), which leaves the
// command as it is and spares a download of the package on every run.
func TestDockerfileStagesRunHere(t *testing.T) {
	t.Parallel()
	requireTool(t, "go", "test")
	requireTool(t, "npm", "npm")
	global, stages := dockerfile(t)
	out := t.TempDir()
	for _, s := range stages[:2] {
		env := []string{"npm_config_prefer_offline=true"}
		for k, v := range s.args {
			if v == "" {
				v = global[k]
			}
			switch k {
			case "OUT":
				v = filepath.Join(out, s.name)
			case "NPM_PREFIX":
				v = filepath.Join(out, "npm")
			case "VERSION":
				v = "dockerfile-test"
			}
			env = append(env, k+"="+v)
		}
		for _, n := range s.instr("RUN") {
			t.Logf("stage %s: RUN %s", s.name, n.args[0])
			run(t, repoRoot, env, "/bin/sh", "-c", n.args[0])
		}
	}
	// The run time stage's COPY sources, where the stages' OUT (/out) now lies.
	for _, n := range stages[2].instr("COPY") {
		from := strings.TrimPrefix(strings.Join(n.flags, ""), "--from=")
		src := strings.Replace(words(n)[0], "/out", filepath.Join(out, from), 1)
		if _, err := os.Stat(src); err != nil {
			t.Errorf("COPY --from=%s %s: %v", from, words(n)[0], err)
		}
	}
	v := run(t, out, nil, filepath.Join(out, "build", "supervisor"), "version")
	if strings.TrimSpace(v) != "supervisor dockerfile-test" {
		t.Errorf("built supervisor says %q", v)
	}
	c := stdoutOf(t, out, filepath.Join(out, "codex", "codex"), "--version")
	if strings.TrimSpace(c) != "codex-cli "+global["CODEX_VERSION"] {
		t.Errorf("codex stage's binary says %q", c)
	}
}

// The Dockerfile reader: continuations (with a comment line inside), flags, the exec and shell
// forms, HEALTHCHECK's CMD, and an instruction left continued at the end.
func TestParseDockerfile(t *testing.T) {
	t.Parallel()
	got, err := parseDockerfile("# c\nFROM a:1 AS b\n\nRUN x \\\n# inside\n  && y\nCOPY --from=b --chown=u /o /p\n" +
		"HEALTHCHECK --interval=3s CMD [\"s\", \"--h\"]\nCMD [\"run\"]\nENV A=1 \\\n    B=2\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []instruction{
		{name: "FROM", args: []string{"a:1", "AS", "b"}},
		{name: "RUN", args: []string{"x  && y"}},
		{name: "COPY", flags: []string{"--from=b", "--chown=u"}, args: []string{"/o", "/p"}},
		{name: "HEALTHCHECK", flags: []string{"--interval=3s"}, args: []string{"CMD", "s", "--h"}},
		{name: "CMD", args: []string{"run"}},
		{name: "ENV", args: []string{"A=1", "B=2"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := parseDockerfile("RUN x \\\n"); err == nil {
		t.Error("an instruction continued past the end parsed")
	}
	if _, err := parseDockerfile("CMD [\"unterminated\"\n"); err == nil {
		t.Error("a broken exec form parsed")
	}
}
