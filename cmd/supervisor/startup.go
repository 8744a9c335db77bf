package main

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"
)

// preflight runs the start-up checks that need the resolved codex binary and the locked state
// directory, before any child is started.
func (d *daemon) preflight(_ context.Context) error {
	if err := warnStateDirMode(d.cfg.StateDir, d.log); err != nil {
		return err
	}
	return nil
}

// warnStateDirMode logs a warning when other users can read, write or enter the state directory:
// it holds the chats' thread ids, the inbox position and the control socket. An operator may have
// chosen that (a shared group), so it is not fatal.
func warnStateDirMode(dir string, log *zap.Logger) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		log.Warn("state directory is accessible to other users; it holds chat thread ids and the control socket (chmod 700 it)",
			zap.String("dir", dir), zap.String("mode", fmt.Sprintf("%04o", perm)))
	}
	return nil
}
