package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/appserver"
)

// leanOverrides returns the -c overrides of appserver.LeanSettings whose key no config layer sets: origins is
// config/read's map of the keys some layer set explicitly (the operator's config.toml, their
// --codex-config flags, a project's .codex/config.toml). When origins could not be read (err),
// nothing is set: an operator's setting is never overridden blind.
func leanOverrides(origins map[string]json.RawMessage, err error, log *zap.Logger) []string {
	if err != nil {
		log.Warn("could not read codex's config; children run without the daemon's lean settings", zap.Error(err))
		return nil
	}
	var out, kept []string
	for _, k := range appserver.LeanSettings() {
		if _, set := origins[k.Key]; set {
			kept = append(kept, k.Key)
			continue
		}
		out = append(out, k.Override())
	}
	if len(kept) > 0 {
		log.Info("codex config sets keys the daemon would set for lean children; the operator's values are kept", zap.Strings("keys", kept))
	}
	return out
}

// leanEnv drops SSL_CERT_DIR from the children's environment when SSL_CERT_FILE names a
// readable regular file inside that directory: the directory's own bundle (Debian's
// /etc/ssl/certs/ca-certificates.crt beside /etc/ssl/certs), which already holds its
// certificates. With both set, codex reads every file of the directory on each model request.
// A SSL_CERT_DIR elsewhere may hold certificates the bundle lacks and is kept, as is every
// other case. It reports whether the variable was dropped.
func leanEnv(env []string) ([]string, bool) {
	file, dir := lookupEnv(env, "SSL_CERT_FILE"), lookupEnv(env, "SSL_CERT_DIR")
	if file == "" || dir == "" || !filepath.IsAbs(file) || filepath.Dir(filepath.Clean(file)) != filepath.Clean(dir) {
		return env, false
	}
	f, err := os.Open(file)
	if err != nil {
		return env, false
	}
	fi, err := f.Stat()
	_ = f.Close()
	if err != nil || !fi.Mode().IsRegular() {
		return env, false
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SSL_CERT_DIR=") {
			out = append(out, kv)
		}
	}
	return out, true
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
