package appservertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/internal/codexversion"
)

// Environment variables CodexBin reads.
const (
	// CodexBinEnv names the native codex binary to use (the Makefile exports it).
	CodexBinEnv = "CODEX_BIN"
	// RequireCodexEnv, when non-empty, turns "codex not found" from a skip into a failure, so
	// CI can never skip the end-to-end tests silently.
	RequireCodexEnv = "CODEX_WARM_REQUIRE_CODEX"
)

// CodexBin returns the native codex binary for tests. It tries, in order: $CODEX_BIN (a native
// binary, or the npm wrapper whose native binary is then looked up), `codex` on PATH resolved
// through its npm layout to the native binary, and the copies `make codex` installs under
// .tools/codex-VERSION/ at the module root (found by walking up from the working directory to
// go.mod), the newest first.
//
// When none is found it skips the test, or fails it when CODEX_WARM_REQUIRE_CODEX is set; the
// message lists every place it looked.
//
// It is self-contained on purpose (it does not call appserver.ResolveBinary) so appservertest
// stays importable from appserver's own tests.
func CodexBin(t testing.TB) string {
	t.Helper()
	cwd, err := os.Getwd()
	if err != nil {
		cwd = ""
	}
	return codexBin(t, os.Getenv, cwd)
}

// codexBin is CodexBin with its environment made explicit for tests.
func codexBin(t testing.TB, getenv func(string) string, cwd string) string {
	t.Helper()
	bin, searched := findCodex(getenv, cwd)
	if bin != "" {
		return bin
	}
	where := strings.Join(searched, "; ")
	if getenv(RequireCodexEnv) != "" {
		t.Fatalf("codex binary not found and %s is set: run `make codex` or set %s to the native binary (searched: %s)",
			RequireCodexEnv, CodexBinEnv, where)
		return ""
	}
	t.Skipf("codex binary not found; run `make test` to install the pinned @openai/codex (searched: %s)", where)
	return ""
}

// findCodex looks for the native codex binary and returns it, or "" and a description of every
// candidate it rejected.
func findCodex(getenv func(string) string, cwd string) (string, []string) {
	var searched []string
	try := func(label, path string) string {
		native, why := nativeFrom(path)
		if native != "" {
			return native
		}
		searched = append(searched, fmt.Sprintf("%s %s (%s)", label, path, why))
		return ""
	}

	if p := getenv(CodexBinEnv); p != "" {
		if bin := try("$"+CodexBinEnv, p); bin != "" {
			return bin, nil
		}
	} else {
		searched = append(searched, "$"+CodexBinEnv+" (unset)")
	}

	if p := lookPathIn("codex", getenv("PATH")); p != "" {
		if bin := try("PATH codex", p); bin != "" {
			return bin, nil
		}
	} else {
		searched = append(searched, "codex on $PATH (none)")
	}

	if root := moduleRoot(cwd); root != "" {
		for _, nm := range toolsNodeModules(filepath.Join(root, ".tools")) {
			for _, p := range npmNativeCandidates(nm) {
				if bin := try("module .tools", p); bin != "" {
					return bin, nil
				}
			}
		}
	} else {
		searched = append(searched, fmt.Sprintf("module root above %q (no go.mod)", cwd))
	}
	return "", searched
}

// toolsNodeModules lists the node_modules directories `make codex` leaves under tools: one per
// version in codex-VERSION/, newest first, then the single one of older checkouts.
func toolsNodeModules(tools string) []string {
	dirs, _ := filepath.Glob(filepath.Join(tools, "codex-*", "node_modules"))
	version := func(dir string) string { return strings.TrimPrefix(filepath.Base(filepath.Dir(dir)), "codex-") }
	slices.SortFunc(dirs, func(a, b string) int {
		c, err := codexversion.Compare(version(b), version(a))
		if err != nil {
			return strings.Compare(b, a)
		}
		return c
	})
	return append(dirs, filepath.Join(tools, "node_modules"))
}

// nativeFrom returns the native binary for path: path itself when it is a native executable, or
// the native binary of the npm package when path is the node wrapper (bin/codex.js, possibly
// reached through a node_modules/.bin symlink). why explains a failure.
func nativeFrom(path string) (native, why string) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", "not found"
	}
	kind, err := executableKind(resolved)
	if err != nil {
		return "", err.Error()
	}
	if kind == kindNative {
		return resolved, ""
	}
	// A script: assume the npm wrapper at <node_modules>/@openai/codex/bin/codex.js.
	pkg := filepath.Dir(filepath.Dir(resolved)) // .../@openai/codex
	nodeModules := filepath.Dir(filepath.Dir(pkg))
	candidates := append(npmNativeCandidates(filepath.Join(pkg, "node_modules")), npmNativeCandidates(nodeModules)...)
	// Layout of codex releases before the per-platform packages.
	candidates = append(candidates, filepath.Join(pkg, "vendor", targetTriple(), "codex", "codex"))
	for _, c := range candidates {
		if k, err := executableKind(c); err == nil && k == kindNative {
			return c, ""
		}
	}
	return "", fmt.Sprintf("a script, and no native binary in its npm layout: tried %s", strings.Join(candidates, ", "))
}

// npmNativeCandidates lists where npm puts the native binary under a node_modules directory.
func npmNativeCandidates(nodeModules string) []string {
	return []string{filepath.Join(nodeModules, "@openai", "codex-"+runtime.GOOS+"-"+npmArch(),
		"vendor", targetTriple(), "bin", "codex")}
}

// npmArch is the CPU name in the npm platform package (@openai/codex-linux-x64).
func npmArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x64"
	default:
		return runtime.GOARCH // arm64
	}
}

// targetTriple is the Rust target directory of the native binary in the npm package.
func targetTriple() string {
	cpu := "x86_64"
	if runtime.GOARCH == "arm64" {
		cpu = "aarch64"
	}
	if runtime.GOOS == "darwin" {
		return cpu + "-apple-darwin"
	}
	return cpu + "-unknown-linux-musl"
}

type execKind int

const (
	kindNative execKind = iota
	kindScript
)

// executableKind tells a native executable from a script by its first bytes. Both must be
// regular files with an execute bit.
func executableKind(path string) (execKind, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, errors.New("not found")
	}
	if !fi.Mode().IsRegular() {
		return 0, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open: %w", err)
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		// The node wrapper need not be executable itself to lead us to the native binary.
		return kindScript, nil
	case strings.HasSuffix(path, ".js"):
		return kindScript, nil
	case fi.Mode().Perm()&0o111 == 0:
		return 0, errors.New("not executable")
	case bytes.Equal(head, []byte("\x7fELF")),
		bytes.Equal(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), // Mach-O 64-bit
		bytes.Equal(head, []byte{0xca, 0xfe, 0xba, 0xbe}): // Mach-O universal
		return kindNative, nil
	}
	return 0, errors.New("neither a native executable nor a script")
}

// lookPathIn is exec.LookPath over an explicit PATH value, so tests can control it.
func lookPathIn(name, pathEnv string) string {
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// moduleRoot walks up from dir to the directory holding go.mod.
func moduleRoot(dir string) string {
	if dir == "" {
		return ""
	}
	for {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && fi.Mode().IsRegular() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// ExecResult is one `codex exec --json` run: the exec-per-message design this project replaces,
// kept for end-to-end comparisons and benchmarks.
type ExecResult struct {
	// ThreadID is thread.started.thread_id; pass it back to ExecTurn to resume.
	ThreadID string
	// Reply is the text of the last completed agent_message item.
	Reply string
	// Items are the completed items in order (agent messages, commands, notices).
	Items []ExecItem
	// Usage is turn.completed.usage. Codex reports the thread's running total there: after
	// `exec resume` it includes every earlier turn of the thread.
	Usage ExecUsage
	// Completed is true when turn.completed arrived.
	Completed bool
	// Error is the message of turn.failed, or of a top-level error event ("" when none).
	Error string
	// Events are the raw stdout lines, one JSON object each.
	Events []json.RawMessage
	// Stderr is codex's stderr (logs and warnings).
	Stderr string
	// ExitCode is the process exit code (-1 when it did not exit normally).
	ExitCode int
	// Duration is the wall time of the process.
	Duration time.Duration
}

// ExecItem is the item of an item.completed event of `codex exec --json`.
type ExecItem struct {
	ID   string `json:"id"`
	Type string `json:"type"` // agent_message, command_execution, error (a notice), ...
	// agent_message
	Text string `json:"text,omitempty"`
	// error items are non-fatal notices such as "Model metadata for ... not found".
	Message string `json:"message,omitempty"`
	// command_execution
	Command          string `json:"command,omitempty"`
	AggregatedOutput string `json:"aggregated_output,omitempty"`
	ExitCode         *int   `json:"exit_code,omitempty"`
	Status           string `json:"status,omitempty"`
}

// ExecUsage is the usage object of turn.completed.
type ExecUsage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningOutputTokens int64 `json:"reasoning_output_tokens"`
}

// execEvent is one line of `codex exec --json` output.
type execEvent struct {
	Type     string          `json:"type"`
	ThreadID string          `json:"thread_id"`
	Item     json.RawMessage `json:"item"`
	Usage    *ExecUsage      `json:"usage"`
	Message  string          `json:"message"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// ExecTurn runs one message the old way: `codex exec --json --skip-git-repo-check -- PROMPT` for
// a new thread (threadID empty), or `codex exec resume --json --skip-git-repo-check -- THREAD
// PROMPT`, with CODEX_HOME=codexHome (empty: inherited) in cwd. codex runs in its own process
// group, which is killed when ctx is done.
//
// The result is filled as far as the output went even when err is non-nil; err is set when
// codex could not start, exited non-zero, was cancelled, or ended without turn.completed.
func ExecTurn(ctx context.Context, bin, codexHome, cwd, threadID, prompt string) (ExecResult, error) {
	args := []string{"exec"}
	if threadID != "" {
		args = append(args, "resume")
	}
	// "--" keeps a prompt that starts with "-" from being read as a flag.
	args = append(args, "--json", "--skip-git-repo-check", "--")
	if threadID != "" {
		args = append(args, threadID)
	}
	args = append(args, prompt)

	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = cwd
	cmd.Env = os.Environ()
	if codexHome != "" {
		cmd.Env = append(cmd.Env, "CODEX_HOME="+codexHome) // the last duplicate wins
	}
	// Stdin stays nil (/dev/null): codex exec appends piped stdin to the prompt.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// codex starts shells of its own; kill the whole group so none outlives the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A grandchild holding the output pipes must not keep Wait from returning.
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	runErr := cmd.Run()
	res := ExecResult{Duration: time.Since(start), Stderr: stderr.String(), ExitCode: -1}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	parseErr := parseExecJSONL(stdout.Bytes(), &res)

	switch {
	case runErr != nil && ctx.Err() != nil:
		return res, fmt.Errorf("codex exec: %w", context.Cause(ctx))
	case runErr != nil:
		msg := res.Error
		if msg == "" {
			msg = tailText(res.Stderr, 2048)
		}
		return res, fmt.Errorf("codex exec: %w: %s", runErr, msg)
	case parseErr != nil:
		return res, fmt.Errorf("codex exec: %w", parseErr)
	case !res.Completed:
		return res, fmt.Errorf("codex exec: no turn.completed in output (error %q)", res.Error)
	}
	return res, nil
}

// parseExecJSONL fills res from `codex exec --json` stdout.
func parseExecJSONL(out []byte, res *ExecResult) error {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev execEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("decode event %q: %w", tailText(string(line), 200), err)
		}
		res.Events = append(res.Events, append(json.RawMessage(nil), line...))
		switch ev.Type {
		case "thread.started":
			res.ThreadID = ev.ThreadID
		case "item.completed":
			var it ExecItem
			if err := json.Unmarshal(ev.Item, &it); err != nil {
				return fmt.Errorf("decode item: %w", err)
			}
			res.Items = append(res.Items, it)
			if it.Type == "agent_message" {
				res.Reply = it.Text
			}
		case "turn.completed":
			res.Completed = true
			if ev.Usage != nil {
				res.Usage = *ev.Usage
			}
		case "turn.failed":
			if ev.Error != nil {
				res.Error = ev.Error.Message
			}
		case "error":
			if res.Error == "" {
				res.Error = ev.Message
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	return nil
}

// tailText returns the last n bytes of s.
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
