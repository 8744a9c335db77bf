package appserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// ErrNotCodex means a binary given as codex is not the codex CLI: `<bin> --version` did not
// print "codex-cli <version>".
var ErrNotCodex = errors.New("is not the codex CLI")

// ErrNoCodex means ResolveBinary was given no binary and found no codex in PATH.
var ErrNoCodex = errors.New("no codex in PATH")

// Version runs `bin --version` with env (nil: the daemon's) and returns the version the codex CLI
// reports ("0.169.0"). A binary that prints anything else, nothing, or fails fails with an error
// wrapping ErrNotCodex that names bin and quotes what it printed: anything else would only fail
// later, on every chat's first message. ctx bounds the run.
func Version(ctx context.Context, bin string, env []string) (string, error) {
	return VersionAs(ctx, bin, env, nil)
}

// VersionAs is Version run with the credentials children get (Config.Credential; nil: the
// daemon's): with --child-user it proves that user can execute bin, where the daemon's root
// would pass every permission check.
func VersionAs(ctx context.Context, bin string, env []string, cred *syscall.Credential) (string, error) {
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = env
	// The same attributes as a child: killed with the daemon, and a stray grandchild holding the
	// output open cannot stall the check past WaitDelay.
	cmd.SysProcAttr = childproc.SysProcAttr(cred)
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &capWriter{buf: &out, left: 4 << 10}, io.Discard
	runErr := cmd.Run()
	line, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	if f := strings.Fields(line); runErr == nil && len(f) >= 2 && f[0] == "codex-cli" {
		return f[1], nil
	}
	printed := "nothing"
	if line != "" {
		printed = fmt.Sprintf("%q", line)
	}
	if runErr != nil {
		printed += fmt.Sprintf(" and failed (%v)", runErr)
	}
	err := fmt.Errorf("%s %w: `%s --version` printed %s; want \"codex-cli <version>\"", bin, ErrNotCodex, bin, printed)
	return "", &versionError{err: err, run: runErr}
}

// versionError is Version's error: its text names the binary and what it printed; it wraps
// ErrNotCodex and the run's own error (a permission denied for a user who cannot execute bin).
type versionError struct{ err, run error }

func (e *versionError) Error() string   { return e.err.Error() }
func (e *versionError) Unwrap() []error { return []error{e.err, e.run} }

// capWriter keeps the first left bytes written to it and discards the rest.
type capWriter struct {
	buf  *bytes.Buffer
	left int
}

func (w *capWriter) Write(p []byte) (int, error) {
	if n := min(len(p), w.left); n > 0 {
		w.buf.Write(p[:n])
		w.left -= n
	}
	return len(p), nil
}

// ResolveBinary finds the native codex binary.
//
// The npm `codex` command is a node script that execs the native binary from an optional
// platform package; launching it costs a node process per child and hides the real pid, so the
// daemon always runs the native binary. hint may be:
//   - the native binary: returned as an absolute path;
//   - the npm node wrapper (`.../@openai/codex/bin/codex.js`, or a `node_modules/.bin/codex`
//     symlink to it): the native binary is looked up in the npm layout around it;
//   - a directory holding node_modules (an npm prefix such as .tools): searched the same way;
//   - empty: "codex" is looked up in PATH and then treated as above (ErrNoCodex when absent).
//
// The error names every place it looked.
func ResolveBinary(hint string) (string, error) {
	if hint == "" {
		p, err := exec.LookPath("codex")
		if err != nil {
			return "", fmt.Errorf("resolve codex binary: %w (%v)", ErrNoCodex, err)
		}
		hint = p
	}
	abs, err := filepath.Abs(hint)
	if err != nil {
		return "", fmt.Errorf("resolve codex binary %q: %w", hint, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("resolve codex binary: %w", err)
	}
	if fi.IsDir() {
		cands := npmCandidates(filepath.Join(abs, "node_modules", "@openai", "codex"))
		if p, ok := firstExecutable(cands); ok {
			return p, nil
		}
		return "", fmt.Errorf("resolve codex binary: %s is a directory without the native codex; looked at %s",
			abs, strings.Join(cands, ", "))
	}
	script, err := isNodeScript(abs)
	if err != nil {
		return "", fmt.Errorf("resolve codex binary: %w", err)
	}
	if !script {
		if fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("resolve codex binary: %s is not executable", abs)
		}
		return abs, nil
	}
	// The wrapper lives at <pkg>/bin/codex.js; follow symlinks (node_modules/.bin/codex,
	// <prefix>/bin/codex) to find <pkg>.
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve codex binary: %w", err)
	}
	pkg := filepath.Dir(filepath.Dir(real))
	cands := npmCandidates(pkg)
	if p, ok := firstExecutable(cands); ok {
		return p, nil
	}
	return "", fmt.Errorf("resolve codex binary: %s is the npm node wrapper and its native binary is missing "+
		"(is the optional package @openai/%s installed?); looked at %s", abs, platformPackage(), strings.Join(cands, ", "))
}

// npmCandidates lists where the native binary sits relative to the @openai/codex package
// directory pkg, in the order the node wrapper itself resolves it.
func npmCandidates(pkg string) []string {
	triple, exe := targetTriple(), "codex"
	if runtime.GOOS == "windows" {
		exe = "codex.exe"
	}
	return []string{
		// Hoisted optional dependency: node_modules/@openai/codex-<os>-<arch>.
		filepath.Join(filepath.Dir(pkg), platformPackage(), "vendor", triple, "bin", exe),
		// Nested: node_modules/@openai/codex/node_modules/@openai/codex-<os>-<arch>.
		filepath.Join(pkg, "node_modules", "@openai", platformPackage(), "vendor", triple, "bin", exe),
		// Vendored into the main package (the wrapper's own fallback).
		filepath.Join(pkg, "vendor", triple, "bin", exe),
		// Layout of older releases.
		filepath.Join(pkg, "vendor", triple, "codex", exe),
	}
}

func firstExecutable(paths []string) (string, bool) {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// platformPackage is the npm package that carries the native binary for this machine.
func platformPackage() string {
	arch := runtime.GOARCH
	if arch == "amd64" {
		arch = "x64"
	}
	goos := runtime.GOOS
	if goos == "windows" {
		goos = "win32"
	}
	return "codex-" + goos + "-" + arch
}

// targetTriple is the Rust target triple of the native binary for this machine.
func targetTriple() string {
	arch := runtime.GOARCH
	switch arch {
	case "amd64":
		arch = "x86_64"
	case "arm64":
		arch = "aarch64"
	}
	switch runtime.GOOS {
	case "darwin":
		return arch + "-apple-darwin"
	case "windows":
		return arch + "-pc-windows-msvc"
	}
	return arch + "-unknown-linux-musl"
}

// isNodeScript reports whether path is a JavaScript file or a script whose shebang runs node.
func isNodeScript(path string) (bool, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".js", ".mjs", ".cjs":
		return true, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, 256)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	head = head[:n]
	if !bytes.HasPrefix(head, []byte("#!")) {
		return false, nil
	}
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	return bytes.Contains(head, []byte("node")), nil
}
