package doctor

import (
	"context"
	"strings"

	"github.com/molecule-ai/codex-warm/appserver"
)

// checkChildUser is the line for --child-user.
func (d *doctor) checkChildUser(ctx context.Context) Result {
	const name = "child user"
	switch {
	case d.cfg.ChildUser == "":
		return skip(name, "not used (no --child-user): codex children run as the daemon's user")
	case d.cred == nil:
		return skip(name, "not checked: --child-user could not be resolved (see configuration)")
	case d.codex.Bin == "":
		return skip(name, "not checked: no codex binary")
	}
	home, wd := appserver.EffectiveCodexHome(d.env), d.cfg.WorkDir
	problems := d.cfg.Steps.ChildAccess(ctx, d.codex.Bin, home, wd)
	if len(problems) == 0 {
		return ok(name, "%s (uid %d) executes %s and writes in CODEX_HOME %s and the working directory %s (tried as that user)",
			d.cfg.ChildUser, d.cred.Uid, d.codex.Bin, home, wd)
	}
	var whats, fixes []string
	fatal := false
	for _, p := range problems {
		whats, fixes, fatal = append(whats, p.What), append(fixes, p.Fix), fatal || p.Fatal
	}
	if fatal {
		return fail(name, strings.Join(whats, "; ")+": every message would fail", strings.Join(fixes, "; "))
	}
	return warn(name, strings.Join(whats, "; "), strings.Join(fixes, "; "))
}
