package childproc

import (
	"context"
	"syscall"

	"go.uber.org/zap"
)

// killRemains SIGKILLs what the exited child left behind, before the waiter reaps it: its
// process group (shells, tools codex started) and its session, where an MCP server or a tool's
// job may run in a process group of its own. While the child is an unreaped zombie its pid, and
// so the group and session ids it leads, cannot be handed out again, so everything found under
// them is the child's; a child that crashed while the daemon runs thus leaves nothing for the
// next boot sweep. It returns once nothing of the group or session runs (zombies waiting for
// their new parent aside), or after CloseGrace with a warning.
func (p *Process) killRemains() {
	// The group first, without reading /proc: the common case, and all there is to do when
	// /proc cannot be read.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	fs := ProcFS{}
	st, err := fs.Stat(p.pid)
	if err != nil {
		p.log.Load().Warn("could not read the exited child to sweep its session", zap.Error(err))
		return
	}
	rec := Record{PID: p.pid, StartTime: st.StartTime, PGID: st.PGRP, SID: st.Session}
	killed, why := sweepRemains(context.Background(), fs, rec, p.cfg.CloseGrace)
	if killed > 0 {
		p.log.Load().Info("killed what the exited child left in its process group and session", zap.Int("killed", killed))
	}
	if why != "" {
		p.log.Load().Warn("sweeping the exited child's process group and session", zap.String("why", why), zap.Int("killed", killed))
	}
}
