package appserver

import "go.uber.org/zap"

// clientLogger is the logger of a client of child pid, from base (Config.Logger or SetLogger's).
func clientLogger(base *zap.Logger, pid int) *zap.Logger {
	return base.Named("appserver").With(zap.Int("pid", pid))
}

// logRelabeler is a child whose own log lines can change logger (a *childproc.Process).
type logRelabeler interface{ SetLogger(*zap.Logger) }

// logger is the client's logger as of now.
func (c *Client) logger() *zap.Logger { return c.logp.Load() }

// SetLogger makes base the logger of the client's later lines, and of its process's, in place
// of Config.Logger: a child started before its chat was known (a spare) names the chat that
// takes it from then on. The client adds its name and the child's pid as at start. Safe to call
// while the client runs.
func (c *Client) SetLogger(base *zap.Logger) {
	if base == nil {
		base = zap.NewNop()
	}
	c.logp.Store(clientLogger(base, c.pid))
	if p, ok := c.proc.(logRelabeler); ok {
		p.SetLogger(base.Named("appserver"))
	}
}
