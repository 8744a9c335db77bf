package daemon

import (
	"os"

	"github.com/molecule-ai/codex-warm/codexauth"
)

// daemonSecrets are the credentials the daemon holds besides the workspace token (which the
// molecule inbox adds itself): CODEX_HOME's ChatGPT login (read afresh each time, so a refreshed
// token is known at once) and the local inbox's and metrics listener's tokens. A file an agent
// sends that holds one of them is refused (package chatfiles).
type daemonSecrets struct {
	codexHome string
	tokens    []string
}

func (s daemonSecrets) Secrets() []string {
	out := codexauth.Secrets(s.codexHome)
	for _, t := range s.tokens {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// workDir is where codex works: --cwd, else the daemon's own working directory ("" when that
// cannot be read: no files are sent then).
func workDir(cwd string) string {
	if cwd != "" {
		return cwd
	}
	wd, _ := os.Getwd()
	return wd
}
