package daemon

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// apiKeyEnv are the variables codex takes an API key from. They stay in the children's
// environment (codex needs them), but the key must never leave in a file or a reply.
var apiKeyEnv = []string{"OPENAI_API_KEY", "CODEX_API_KEY"}

// secretInputs is what the daemon knows of its secrets when it starts.
type secretInputs struct {
	// removed are the secret variables HardenProcess takes out of the environment (secretEnv).
	removed map[string]string
	getenv  func(string) string
	// listenerTokens are the local inbox's and the metrics listener's bearer tokens.
	listenerTokens []string
	// carried is the previous image's set, on a reload (handoff.Doc.Secrets).
	carried map[string][][]string
}

// newSecretSet is the daemon's one secret set (package secretset), fed with what is known at
// start: the previous image's set on a reload, the platform's login in the environment, the
// listeners' tokens and the API keys. CODEX_HOME's auth.json (readAuthFile),
// the Molecule inbox and the login sources add what they learn later.
func newSecretSet(in secretInputs) *secretset.Set {
	set := secretset.New()
	carried := make(map[secretset.Source][][]string, len(in.carried))
	for src, gens := range in.carried {
		carried[secretset.Source(src)] = gens
	}
	set.Import(carried)
	for _, k := range platformLoginEnv {
		if v := in.removed[k]; v != "" {
			set.Add(secretset.PlatformLogin, codexauth.LoginSecrets([]byte(v))...)
		}
	}
	set.Add(secretset.Listeners, in.listenerTokens...)
	for _, k := range apiKeyEnv {
		set.Add(secretset.Environment, in.getenv(k))
	}
	return set
}

// readAuthFile makes codexHome's auth.json a source of set, read again at every use once the
// file changed: a token the daemon or codex refreshed is known at once.
func readAuthFile(set *secretset.Set, codexHome string) {
	set.AddReader(secretset.AuthFile, (&authFileSecrets{codexHome: codexHome}).read)
}

// exportSecrets is set as the handoff document carries it.
func exportSecrets(set *secretset.Set) map[string][][]string {
	out := make(map[string][][]string)
	for src, gens := range set.Export() {
		out[string(src)] = gens
	}
	return out
}

// authFileSecrets reads auth.json's secrets when the file changed since the last read: the set
// reads it at every use (each answer written, each file sent), and a stat is cheap beside a read
// and a parse. The daemon and codex replace the file by renaming a new one over it, which changes
// its inode.
type authFileSecrets struct {
	codexHome string

	mu    sync.Mutex
	read1 bool // read at least once
	stamp fileStamp
	vals  []string
}

// fileStamp says whether a file may have changed since it was read.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func (a *authFileSecrets) read() []string {
	fi, err := os.Stat(filepath.Join(a.codexHome, codexauth.AuthFile))
	if err != nil {
		return nil
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.read1 || st != a.stamp {
		a.vals, a.stamp, a.read1 = codexauth.Secrets(a.codexHome), st, true
	}
	return a.vals
}

// learningSource is src whose every login read goes into set: each generation of the login the
// platform owns, from wherever it was read, is a secret.
func learningSource(set *secretset.Set, src codexauth.Source) codexauth.Source {
	read := src.Read
	src.Read = func(ctx context.Context) ([]byte, error) {
		doc, err := read(ctx)
		if err == nil {
			set.Add(secretset.PlatformLogin, codexauth.LoginSecrets(doc)...)
		}
		return doc, err
	}
	return src
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
