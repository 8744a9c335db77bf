package codexversion

import "fmt"

// Risk says what running codex v, outside the tested range on side where
// (Range), risks, and what to do about it.
func Risk(v string, where int) (detail, fix string) {
	tested := fmt.Sprintf("this release is tested with (%s to %s)", Oldest, Newest)
	fix = "install @openai/codex@" + Newest + " (`make install` puts it beside supervisor)"
	if where < 0 {
		return fmt.Sprintf("codex-cli %s is older than the versions %s: it may lack requests the daemon sends "+
			"(turn/steer, thread/turns/list, client-held ChatGPT tokens), so turns could fail where they work on a tested version", v, tested), fix
	}
	return fmt.Sprintf("codex-cli %s is newer than the versions %s: an app-server protocol change (a renamed field, "+
			"a new error kind, a changed default) could fail turns or lose replies, unnoticed until a chat meets it", v, tested),
		fix + ", or try " + v + " first in a checkout: make compat CODEX_VERSION=" + v
}
