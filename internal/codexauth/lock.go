package codexauth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/molecule-ai/codex-warm/internal/atomicfile"
)

// DefaultLockWait bounds the wait for auth.lock. codex holds it only while it re-reads and
// renames auth.json (milliseconds); a holder past this bound is stuck or is another refresher
// in the middle of its network call.
const DefaultLockWait = 10 * time.Second

// lockPoll is how often a held auth.lock is tried again: flock has no timeout of its own, and
// a blocked flock(2) could not be given up on (nor would it let SIGTERM end the daemon).
const lockPoll = 25 * time.Millisecond

// LockHeldError is auth.lock held by another process past the wait.
type LockHeldError struct {
	Path   string
	Waited time.Duration
	// Holder names the process holding it ("pid 123 (codex)"), or "" when /proc does not say.
	Holder string
}

func (e *LockHeldError) Error() string {
	who := "another process"
	if e.Holder != "" {
		who = e.Holder
	}
	return fmt.Sprintf("%s is held by %s (waited %s): the ChatGPT login is not refreshed while another process may be refreshing it", e.Path, who, e.Waited)
}

// lockAuth takes codex's flock on dir/LockFile, waiting at most wait and never past ctx, and
// returns its release. codex holds the same lock while it re-reads auth.json and renames a new
// one onto it; the daemon holds it across its whole refresh (re-read, decide, call, write back),
// so that anyone who follows the lock never spends a refresh token the daemon spends.
//
// codex 0.169 also creates auth.json.lock beside the file it writes (beside the target when
// auth.json is a link to a shared file: a codex whose CODEX_HOME is elsewhere shares only that
// one), so the daemon holds that lock too, after auth.lock. Both waits are bounded, so a process
// taking them in the other order delays the daemon's refresh at worst, never deadlocks it.
func lockAuth(ctx context.Context, dir string, wait time.Duration, holder LockHolderFunc) (unlock func(), err error) {
	unlock, err = lockOne(ctx, filepath.Join(dir, LockFile), wait, holder)
	if err != nil {
		return nil, err
	}
	target, err := authPath(dir)
	if err != nil {
		unlock()
		return nil, err
	}
	unlockFile, err := lockOne(ctx, target+".lock", wait, holder)
	if err != nil {
		unlock()
		return nil, err
	}
	first := unlock
	return func() { unlockFile(); first() }, nil
}

// LockHolderFunc names the process holding a flock on the file with device dev and inode ino
// ("pid 123 (codex)"), or "" when it cannot tell. Looking at other processes is not this
// package's business: the daemon passes one backed by its /proc reader.
type LockHolderFunc func(dev, ino uint64) string

// lockOne takes the flock on path.
func lockOne(ctx context.Context, path string, wait time.Duration, holder LockHolderFunc) (unlock func(), err error) {
	f, err := atomicfile.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	start := time.Now()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(lockPoll)
	defer tick.Stop()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			who := lockHolder(f, holder)
			f.Close()
			return nil, &LockHeldError{Path: path, Waited: time.Since(start).Round(time.Millisecond), Holder: who}
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for %s: %w", path, context.Cause(ctx))
		}
	}
}

// lockHolder asks holder who holds the lock on f's file.
func lockHolder(f *os.File, holder LockHolderFunc) string {
	var st unix.Stat_t
	if holder == nil || unix.Fstat(int(f.Fd()), &st) != nil {
		return ""
	}
	return holder(st.Dev, st.Ino)
}
