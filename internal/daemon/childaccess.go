package daemon

// What a --child-user must be able to do before the first message: execute codex, and write in
// CODEX_HOME and the threads' working directory. The daemon runs as root, and root passes every
// permission check, so mode bits read by the daemon prove nothing: each is tried as that user,
// with the credentials the daemon gives its children.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/childproc"
)

// childAccessProblem is one thing the child user cannot do, and how to fix it.
type childAccessProblem struct {
	What, Fix string
	// Fatal: every codex child would fail (codex cannot start, or has no CODEX_HOME).
	Fatal bool
}

func (p childAccessProblem) Error() string { return p.What + " — fix: " + p.Fix }

// checkChildAccess tries, as user (cred, with the children's env), to run `bin --version` and
// to create and remove a file in codexHome (or, when it does not exist yet, in the directory
// codex would create it in) and in workDir. It returns what failed.
func checkChildAccess(ctx context.Context, user string, cred *syscall.Credential, bin string, env []string, codexHome, workDir string) []childAccessProblem {
	var out []childAccessProblem
	vctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	if _, err := appserver.VersionAs(vctx, bin, env, cred); err != nil {
		fix := fmt.Sprintf("install codex where %s can reach it (`make install` puts it in /usr/local/libexec/codex-warm, mode 0755) and point --codex-bin at it", user)
		if dir := closedDir(bin, cred); dir != "" {
			fix += fmt.Sprintf(", or let others through %s (chmod o+x %s)", dir, dir)
		}
		why := err.Error()
		if errors.Is(err, fs.ErrPermission) {
			why = "permission denied"
		}
		out = append(out, childAccessProblem{Fatal: true, Fix: fix,
			What: fmt.Sprintf("--child-user %s cannot execute codex %s: %s", user, bin, why)})
	}
	home, created := existingDir(codexHome)
	if err := writeProbeAs(ctx, home, cred, env); err != nil {
		what := fmt.Sprintf("--child-user %s cannot write in CODEX_HOME %s: %v", user, codexHome, err)
		fix := fmt.Sprintf("chown -R %s %s", user, codexHome)
		if created {
			what = fmt.Sprintf("--child-user %s cannot create CODEX_HOME %s in %s: %v", user, codexHome, home, err)
			fix = fmt.Sprintf("install -d -m 700 -o %s %s", user, codexHome)
		}
		out = append(out, childAccessProblem{What: what, Fix: fix, Fatal: true})
	}
	if err := writeProbeAs(ctx, workDir, cred, env); err != nil {
		out = append(out, childAccessProblem{
			What: fmt.Sprintf("--child-user %s cannot write in the threads' working directory %s: %v: codex could read but not change files there", user, workDir, err),
			Fix:  fmt.Sprintf("chown %s %s, or point --cwd at a directory it owns", user, workDir)})
	}
	return out
}

// existingDir returns dir, or its nearest existing ancestor when dir does not exist (created
// then says so).
func existingDir(dir string) (string, bool) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			return d, d != dir
		}
	}
}

// writeProbeAs creates and removes a file in dir as cred, in a process of its own: the same
// credentials as a codex child, not the daemon's. The shell's message says what was denied.
func writeProbeAs(ctx context.Context, dir string, cred *syscall.Credential, env []string) error {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	const script = `f="$1/.codex-warm-probe-$$" && : > "$f" && rm -f "$f"`
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script, "sh", dir)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = childproc.SysProcAttr(cred)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	if msg := strings.TrimSpace(string(out)); msg != "" {
		// "sh: 1: cannot create /x/.codex-warm-probe-12: Permission denied"
		return errors.New(msg[strings.LastIndex(msg, ": ")+2:])
	}
	return err
}

// closedDir names the first directory above path that cred can neither search as owner, as
// group nor as other (mode bits; only a hint for the fix, the probe itself decides).
func closedDir(path string, cred *syscall.Credential) string {
	var dirs []string
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
		if d == filepath.Dir(d) {
			break
		}
	}
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return ""
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return ""
		}
		perm := fi.Mode().Perm()
		switch {
		case st.Uid == cred.Uid && perm&0o100 != 0:
		case st.Uid != cred.Uid && st.Gid == cred.Gid && perm&0o010 != 0:
		case st.Uid != cred.Uid && st.Gid != cred.Gid && perm&0o001 != 0:
		default:
			return d
		}
	}
	return ""
}

// threadsWorkDir is the working directory codex threads get: --cwd, else the daemon's own.
func threadsWorkDir(cwd string) string {
	if cwd != "" {
		return cwd
	}
	wd, _ := os.Getwd()
	return wd
}

// checkChildUserAtStart is run's check of --child-user before it serves: what would fail every
// codex child refuses the start, the rest is logged.
func checkChildUserAtStart(ctx context.Context, cfg Config, cred *syscall.Credential, bin string, env []string, log *zap.Logger) error {
	if cred == nil {
		return nil
	}
	var fatal []error
	for _, p := range checkChildAccess(ctx, cfg.ChildUser, cred, bin, env, appserver.EffectiveCodexHome(env), threadsWorkDir(cfg.Cwd)) {
		if p.Fatal {
			fatal = append(fatal, p)
			continue
		}
		log.Warn(p.What, zap.String("fix", p.Fix))
	}
	return errors.Join(fatal...)
}
