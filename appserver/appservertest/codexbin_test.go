package appservertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
	"go.uber.org/goleak"
)

// fakeELF is enough of a native executable for findCodex, which only reads the magic.
const fakeELF = "\x7fELF fake codex"

func writeTestFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

// npmInstall lays out what `npm install @openai/codex` leaves under nodeModules: the node
// wrapper, its .bin symlink and (unless withNative is false) the platform package's native
// binary. It returns the .bin entry and the native binary path.
func npmInstall(t *testing.T, nodeModules string, withNative bool) (binLink, native string) {
	t.Helper()
	writeTestFile(t, filepath.Join(nodeModules, "@openai", "codex", "bin", "codex.js"), "#!/usr/bin/env node\n", 0o755)
	binLink = filepath.Join(nodeModules, ".bin", "codex")
	if err := os.MkdirAll(filepath.Dir(binLink), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../@openai/codex/bin/codex.js", binLink); err != nil {
		t.Fatal(err)
	}
	native = npmNativeCandidates(nodeModules)[0]
	if withNative {
		writeTestFile(t, native, fakeELF, 0o755)
	}
	return binLink, native
}

func TestNpmLayoutNames(t *testing.T) {
	// The names npm uses for this platform; pinned for the platforms CI runs on.
	want := map[string]string{
		"linux/amd64": "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
		"linux/arm64": "@openai/codex-linux-arm64/vendor/aarch64-unknown-linux-musl/bin/codex",
	}[runtime.GOOS+"/"+runtime.GOARCH]
	if want == "" {
		t.Skipf("no pinned npm layout for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if got := npmNativeCandidates("nm")[0]; got != filepath.Join("nm", want) {
		t.Errorf("native path = %s, want nm/%s", got, want)
	}
}

func TestFindCodex(t *testing.T) {
	root := t.TempDir()

	// A project-local install, reached through PATH=node_modules/.bin.
	local := filepath.Join(root, "local", "node_modules")
	localBin, localNative := npmInstall(t, local, true)

	// A global install: npm nests the platform package under the wrapper's package.
	global := filepath.Join(root, "global", "lib", "node_modules")
	writeTestFile(t, filepath.Join(global, "@openai", "codex", "bin", "codex.js"), "#!/usr/bin/env node\n", 0o755)
	globalNative := npmNativeCandidates(filepath.Join(global, "@openai", "codex", "node_modules"))[0]
	writeTestFile(t, globalNative, fakeELF, 0o755)
	globalBinDir := filepath.Join(root, "global", "bin")
	if err := os.MkdirAll(globalBinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(global, "@openai", "codex", "bin", "codex.js"), filepath.Join(globalBinDir, "codex")); err != nil {
		t.Fatal(err)
	}

	// A module with `make codex` done for two versions: .tools/codex-VERSION/node_modules at its
	// root, tests run in a subdir; the newer version (by number, not by name) is found.
	mod := filepath.Join(root, "mod")
	writeTestFile(t, filepath.Join(mod, "go.mod"), "module x\n", 0o644)
	_, _ = npmInstall(t, filepath.Join(mod, ".tools", "codex-1.9.0", "node_modules"), true)
	_, toolsNative := npmInstall(t, filepath.Join(mod, ".tools", "codex-1.10.0", "node_modules"), true)
	modSub := filepath.Join(mod, "pkg", "sub")
	if err := os.MkdirAll(modSub, 0o755); err != nil {
		t.Fatal(err)
	}

	// Broken candidates.
	_, _ = npmInstall(t, filepath.Join(root, "wrapperonly", "node_modules"), false)
	wrapperOnly := filepath.Join(root, "wrapperonly", "node_modules", "@openai", "codex", "bin", "codex.js")
	notExec := filepath.Join(root, "noexec", "codex")
	writeTestFile(t, notExec, fakeELF, 0o644)
	nowhere := filepath.Join(root, "nowhere") // no go.mod above it
	if err := os.MkdirAll(nowhere, 0o755); err != nil {
		t.Fatal(err)
	}
	emptyPath := filepath.Join(root, "emptybin")
	if err := os.MkdirAll(emptyPath, 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		codexBin    string
		path        string
		cwd         string
		want        string
		wantSearch  []string // substrings of the joined search list when want is ""
		wantNoFound bool
	}{
		{name: "CODEX_BIN native", codexBin: localNative, path: emptyPath, cwd: nowhere, want: localNative},
		{name: "CODEX_BIN is the node wrapper", codexBin: filepath.Join(local, "@openai", "codex", "bin", "codex.js"),
			path: emptyPath, cwd: nowhere, want: localNative},
		{name: "CODEX_BIN wins over PATH", codexBin: toolsNative, path: globalBinDir, cwd: nowhere, want: toolsNative},
		{name: "PATH node_modules/.bin symlink", path: filepath.Dir(localBin), cwd: nowhere, want: localNative},
		{name: "PATH global install, nested platform package", path: globalBinDir, cwd: nowhere, want: globalNative},
		{name: "module .tools from a subdirectory", path: emptyPath, cwd: modSub, want: toolsNative},
		{name: "bad CODEX_BIN falls through to PATH", codexBin: notExec, path: globalBinDir, cwd: nowhere, want: globalNative},
		{
			name: "nothing usable", codexBin: notExec, path: emptyPath, cwd: nowhere,
			wantSearch: []string{"$CODEX_BIN " + notExec + " (not executable)", "codex on $PATH (none)"},
		},
		{
			name: "wrapper without native binary", codexBin: wrapperOnly, path: emptyPath, cwd: nowhere,
			wantSearch: []string{wrapperOnly + " (a script, and no native binary in its npm layout"},
		},
		{
			name: "unset CODEX_BIN is reported", path: emptyPath, cwd: nowhere,
			wantSearch: []string{"$CODEX_BIN (unset)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"CODEX_BIN": tt.codexBin, "PATH": tt.path}
			got, searched := findCodex(func(k string) string { return env[k] }, tt.cwd)
			if tt.want != "" {
				if got != tt.want {
					t.Errorf("got %q, want %q (searched %q)", got, tt.want, searched)
				}
				return
			}
			// The temp dir may sit below a go.mod of the host, so only assert what we control.
			if got != "" && !strings.HasPrefix(got, root) {
				t.Skipf("a real codex above the temp dir was found: %s", got)
			}
			if got != "" {
				t.Fatalf("got %q, want none", got)
			}
			joined := strings.Join(searched, "; ")
			for _, s := range tt.wantSearch {
				if !strings.Contains(joined, s) {
					t.Errorf("search list %q lacks %q", joined, s)
				}
			}
		})
	}
}

// fakeTB records Skipf/Fatalf and ends the goroutine like the real ones do.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestCodexBinSkipsOrFailsWhenMissing(t *testing.T) {
	dir := t.TempDir()
	for _, require := range []string{"", "1"} {
		t.Run("require="+require, func(t *testing.T) {
			env := map[string]string{"PATH": dir, RequireCodexEnv: require}
			f := &fakeTB{TB: t}
			done := make(chan string, 1)
			go func() {
				defer close(done)
				done <- codexBin(f, func(k string) string { return env[k] }, dir)
			}()
			if got := <-done; got != "" {
				t.Skipf("a real codex above the temp dir was found: %s", got)
			}
			if require == "" {
				if f.fatal != "" || !strings.Contains(f.skipped, "run `make test` to install the pinned @openai/codex (searched: ") {
					t.Errorf("skip %q fatal %q", f.skipped, f.fatal)
				}
			} else if f.skipped != "" || !strings.Contains(f.fatal, RequireCodexEnv+" is set") ||
				!strings.Contains(f.fatal, "searched: ") {
				t.Errorf("skip %q fatal %q", f.skipped, f.fatal)
			}
		})
	}
}

// execEnv is a mock model, a CODEX_HOME pointing at it and a working directory.
type execEnv struct {
	bin, home, cwd string
	mock           *mockmodel.Model
}

func newExecEnv(t *testing.T) execEnv {
	t.Helper()
	bin := CodexBin(t)
	m, err := mockmodel.New(mockmodel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close mock model: %v", err)
		}
	})
	home := t.TempDir()
	if err := m.WriteCodexHome(home); err != nil {
		t.Fatal(err)
	}
	isolateShell(t)
	return execEnv{bin: bin, home: home, cwd: t.TempDir(), mock: m}
}

// isolateShell gives the codex child (which ExecTurn starts with this process's environment) an
// empty HOME and no BASH_ENV, so the shells codex runs for tool calls read none of the machine's
// startup files. Under codex's sandbox (seccomp) `bash -c` takes its /dev/null stdin for a
// network connection (getpeername is refused) and, when SHLVL is unset, sources ~/.bashrc as if
// started by rshd; whatever the profile prints (pyenv's "cannot rehash: ... isn't writable" inside the
// sandbox) then lands in the command's output.
func isolateShell(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("BASH_ENV", "")
	t.Setenv("ENV", "")
}

// checkMockLeaks fails the test if it leaves goroutines behind (the mock model's, codex's
// output readers). It runs as a cleanup registered first, so after the mock's Close.
func checkMockLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

func execCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestExecTurnNewThenResumeKeepsHistory(t *testing.T) {
	checkMockLeaks(t)
	e := newExecEnv(t)
	ctx := execCtx(t)

	r1, err := ExecTurn(ctx, e.bin, e.home, e.cwd, "", "hello")
	if err != nil {
		t.Fatalf("exec: %v\nstderr: %s", err, r1.Stderr)
	}
	if r1.ThreadID == "" || r1.Reply != "reply #1: hello" || !r1.Completed || r1.ExitCode != 0 || r1.Error != "" {
		t.Fatalf("first turn = %+v", r1)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 1 {
		t.Fatalf("model requests = %d", len(reqs))
	}
	// The mock counts one input token per item and one output token per word.
	if want := (ExecUsage{InputTokens: int64(len(reqs[0].Input)), OutputTokens: 3}); r1.Usage != want {
		t.Errorf("usage = %+v, want %+v", r1.Usage, want)
	}

	r2, err := ExecTurn(ctx, e.bin, e.home, e.cwd, r1.ThreadID, "again")
	if err != nil {
		t.Fatalf("exec resume: %v\nstderr: %s", err, r2.Stderr)
	}
	if r2.ThreadID != r1.ThreadID || r2.Reply != "reply #2: again" {
		t.Fatalf("resumed turn = %+v", r2)
	}
	reqs = e.mock.Requests()
	if len(reqs) != 2 || !reflect.DeepEqual(reqs[1].UserTexts, []string{"hello", "again"}) {
		t.Fatalf("resumed request did not carry the history: %+v", reqs)
	}
	// exec reports the thread's running total, not the turn's own usage.
	if want := r1.Usage.InputTokens + int64(len(reqs[1].Input)); r2.Usage.InputTokens != want {
		t.Errorf("resumed input tokens = %d, want running total %d", r2.Usage.InputTokens, want)
	}
	if u := e.mock.Unhandled(); len(u) != 0 {
		t.Errorf("codex made requests the mock does not serve: %v", u)
	}
}

func TestExecTurnShellToolCall(t *testing.T) {
	checkMockLeaks(t)
	e := newExecEnv(t)
	r, err := ExecTurn(execCtx(t), e.bin, e.home, e.cwd, "", "SHELL please")
	if err != nil {
		t.Fatalf("exec: %v\nstderr: %s", err, r.Stderr)
	}
	var cmd *ExecItem
	for i := range r.Items {
		if r.Items[i].Type == "command_execution" {
			cmd = &r.Items[i]
		}
	}
	if cmd == nil || !strings.Contains(cmd.Command, mockmodel.ShellCommand) || cmd.AggregatedOutput != "shell-ran\n" ||
		cmd.ExitCode == nil || *cmd.ExitCode != 0 || cmd.Status != "completed" {
		t.Fatalf("command item = %+v (items %+v)", cmd, r.Items)
	}
	if !strings.HasPrefix(r.Reply, "tool said: ") || !strings.Contains(r.Reply, "shell-ran") {
		t.Errorf("reply = %q", r.Reply)
	}
	reqs := e.mock.Requests()
	if len(reqs) != 2 || reqs[0].HasToolOutput || !reqs[1].HasToolOutput || !strings.Contains(reqs[1].ToolOutput, "shell-ran") {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestExecTurnModelFailure(t *testing.T) {
	checkMockLeaks(t)
	e := newExecEnv(t)
	r, err := ExecTurn(execCtx(t), e.bin, e.home, e.cwd, "", "FAIL now")
	if err == nil {
		t.Fatalf("a failed turn returned no error: %+v", r)
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || r.ExitCode != 1 || r.Completed || r.Error == "" || r.Reply != "" {
		t.Errorf("err %v, result %+v", err, r)
	}
	if !strings.Contains(err.Error(), r.Error) {
		t.Errorf("error %q does not carry the turn error %q", err, r.Error)
	}
	// An error on the websocket makes codex try the same request once over HTTP (and stay on
	// HTTP); request_max_retries=0 stops any retry beyond that.
	reqs := e.mock.Requests()
	if len(reqs) != 2 || !reqs[0].Websocket || reqs[1].Websocket {
		t.Errorf("model requests = %+v: want one on the websocket and its one HTTP fallback", reqs)
	}
}

func TestExecTurnHangCancelledReleasesStream(t *testing.T) {
	checkMockLeaks(t)
	e := newExecEnv(t)
	ctx, cancel := context.WithCancel(execCtx(t))
	defer cancel()
	type outcome struct {
		r   ExecResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := ExecTurn(ctx, e.bin, e.home, e.cwd, "", "HANG now")
		done <- outcome{r, err}
	}()
	wctx := execCtx(t)
	if err := e.mock.WaitHung(wctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	o := <-done
	if !errors.Is(o.err, context.Canceled) || o.r.Completed {
		t.Errorf("err %v, result %+v", o.err, o.r)
	}
	// Killing codex closes its connection; the hung handler must notice.
	if err := e.mock.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
}

func TestExecResumeUnknownThread(t *testing.T) {
	checkMockLeaks(t)
	e := newExecEnv(t)
	r, err := ExecTurn(execCtx(t), e.bin, e.home, e.cwd, "01a1fd8b-0000-7000-8000-000000000000", "hi")
	if err == nil || !strings.Contains(err.Error(), "no rollout found") {
		t.Errorf("err %v, result %+v", err, r)
	}
}

func TestCodexHomePassesStrictConfig(t *testing.T) {
	e := newExecEnv(t)
	check := func(home string) ([]byte, error) {
		cmd := exec.CommandContext(execCtx(t), e.bin, "app-server", "--strict-config", "--print-startup-config")
		cmd.Env = append(os.Environ(), "CODEX_HOME="+home)
		return cmd.CombinedOutput()
	}
	if out, err := check(e.home); err != nil {
		t.Fatalf("codex rejects the written config: %v\n%s", err, out)
	}
	// Strict mode really checks keys, so the assertion above can fail.
	bad := t.TempDir()
	b, err := os.ReadFile(filepath.Join(e.home, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(bad, "config.toml"), "no_such_key_for_test = 1\n"+string(b), 0o600)
	if out, err := check(bad); err == nil || !strings.Contains(string(out), "no_such_key_for_test") {
		t.Errorf("strict config accepted an unknown key: %v\n%s", err, out)
	}
}
