package control

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Listen listens on the control socket of stateDir, private to the daemon's user (mode 0600
// from its bind): the status names chats, which is not for other users of the host. The caller
// holds the state directory's lock, so a socket file already there is left over from a daemon
// that died, and is replaced.
func Listen(stateDir string) (net.Listener, error) {
	path := filepath.Join(stateDir, SocketName)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket %s: %w", path, err)
	}
	ln, err := ListenPrivateUnix(path)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	return ln, nil
}

// ListenPrivateUnix listens on a unix socket at path whose file has mode 0600 from its creation,
// without touching the umask. The umask is the process's, not a thread's: a codex child forked
// while it was narrowed (a spare or a chat's child starting beside the control socket) kept the
// narrow one for life, and created CODEX_HOME's thread-writer-locks directory 0600, without the
// search bit, which every later child of a daemon without CAP_DAC_OVERRIDE (any user but root
// with its capabilities, a --child-user) then failed to open. Instead the socket's own inode gets
// the mode before bind: Linux creates the file with that inode's mode minus the umask
// (unix_bind_bsd in net/unix/af_unix.c), which can only narrow it further.
func ListenPrivateUnix(path string) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), path) // owns fd from here on
	defer f.Close()                    // net.FileListener below keeps a duplicate
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return nil, os.NewSyscallError("fchmod", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		_ = os.Remove(path)
		return nil, os.NewSyscallError("listen", err)
	}
	ln, err := net.FileListener(f) // a duplicate, close-on-exec
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	return ln, nil
}
