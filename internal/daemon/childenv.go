package daemon

// The children's environment and credentials, and the daemon's own hardening.

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
)

// secretEnv returns the variables that hold secrets or lead to them: CONFIGS_DIR holds the
// workspace token file, MOLECULE_WORKSPACE_TOKEN_FILE names it, platformLoginEnv the org's
// ChatGPT login. They cross a reload in the handoff document (reload.go). codex runs model-written shell
// commands: the platform token would let them act as the workspace, and the org's refresh token
// would let them spend the login every workspace of the org shares.
func secretEnv() []string {
	return append([]string{"MOLECULE_WORKSPACE_TOKEN", molecule.TokenFileEnv, "CODEX_WARM_INBOX_TOKEN", "CODEX_WARM_METRICS_TOKEN", "CONFIGS_DIR"},
		platformLoginEnv...)
}

// HardenProcess removes secretEnv from the daemon's environment and makes the process
// non-dumpable. Unsetting alone is not enough: /proc/<pid>/environ shows the environment the
// process started with, whatever it unset since. A non-dumpable process's /proc files (environ,
// mem, fds) and ptrace are closed to every process without CAP_SYS_PTRACE, including the
// same-user commands codex runs for the model. Children start dumpable again (execve resets it).
func HardenProcess(log *zap.Logger) {
	for _, k := range secretEnv() {
		_ = os.Unsetenv(k)
	}
	if err := nonDumpable(); err != nil {
		log.Warn("could not make the daemon non-dumpable: same-user processes can read its memory and start environment", zap.Error(err))
	}
}

// nonDumpable closes the process's /proc files, memory and descriptors to processes without
// CAP_SYS_PTRACE. execve makes an image dumpable again.
func nonDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// childCredential resolves --child-user to the credential codex children run with, and points
// HOME in env at that user's home. An empty name means the daemon's own user (nil).
func childCredential(name string, env []string) (*syscall.Credential, []string, error) {
	if name == "" {
		return nil, env, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, nil, fmt.Errorf("--child-user %q: %w", name, err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, fmt.Errorf("--child-user %q: %w", name, err)
	}
	if uint64(os.Geteuid()) != uid && os.Geteuid() != 0 {
		return nil, nil, fmt.Errorf("--child-user %q: the daemon runs as uid %d and cannot start processes as uid %d (run it as root)", name, os.Geteuid(), uid)
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") {
			out = append(out, kv)
		}
	}
	out = append(out, "HOME="+u.HomeDir)
	// No supplementary groups: the daemon's (root's) must not carry over.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, out, nil
}

// childEnv is the daemon's environment without secretEnv and serviceManagerEnv.
func childEnv(env []string) []string {
	secrets := append(secretEnv(), serviceManagerEnv()...)
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(secrets, name) {
			out = append(out, kv)
		}
	}
	return out
}
