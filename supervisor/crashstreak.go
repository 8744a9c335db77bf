package supervisor

import "time"

// CrashStreak is the pool's run of codex child crashes since a turn last completed: children that
// failed to start, timed out in their handshake, or died before completing a turn (isCrash), of
// chat keys and of spares alike. A completed turn ends the streak. The Molecule heartbeat reports
// a long streak as runtime_state "wedged".
type CrashStreak struct {
	// Crashes counts the crashes since the last completed turn (since start when none completed).
	Crashes int
	// Last is the last crash's cause and LastAt when it happened; zero when Crashes is 0.
	Last   string
	LastAt time.Time
}

// crashStreak is the Supervisor's CrashStreak, in the state table.
type crashStreak struct{ CrashStreak }

func (c *crashStreak) crashed(cause error, now time.Time) {
	c.Crashes++
	c.Last, c.LastAt = "codex child crashed", now
	if cause != nil {
		c.Last = cause.Error()
	}
}

func (c *crashStreak) completed() { c.CrashStreak = CrashStreak{} }

// now is the streak as it stands.
func (c *crashStreak) now() CrashStreak { return c.CrashStreak }

// Crashes returns the pool's current crash streak. It takes only the table's lock (no /proc reads),
// so the heartbeat may call it on every beat.
func (s *Supervisor) Crashes() (cs CrashStreak) {
	s.st.do(func(t *table) { cs = t.crashes() })
	return cs
}
