package appserver

import (
	"os/user"
	"path/filepath"
	"strings"
)

// EffectiveCodexHome is the CODEX_HOME a codex started with env uses: the variable when set and
// not empty (codex treats an empty one as unset), else $HOME/.codex, with HOME from env or, when
// env has none, from the password database as codex does. Logs and checks report this, not the
// variable, so an unset CODEX_HOME still shows where codex looks.
func EffectiveCodexHome(env []string) string {
	if h := lookupEnv(env, "CODEX_HOME"); h != "" {
		return h
	}
	home := lookupEnv(env, "HOME")
	if home == "" {
		if u, err := user.Current(); err == nil {
			home = u.HomeDir
		}
	}
	return filepath.Join(home, ".codex")
}

// lookupEnv returns the last value of key in env ("" when unset): the one a process sees.
func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
