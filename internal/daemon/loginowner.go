package daemon

// Who owns codex's ChatGPT login (docs/login.md): the platform that provides it, the daemon, or
// each child. The platform side (the Molecule secrets reader) is wired here, so codexauth never
// imports an inbox.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/secretset"
)

// Values of --chatgpt-tokens.
const (
	tokensAuto     = "auto"
	tokensPlatform = "platform"
	tokensOwn      = "own"
	tokensOff      = "off"
)

// platformLoginEnv are the variables a Molecule codex workspace gets the org's login in, the
// first set one winning (the codex template's start.sh: CODEX_AUTH_JSON, then the older alias
// CODEX_CHATGPT_AUTH_JSON). They are secrets: no child ever sees them (secretEnv).
var platformLoginEnv = []string{"CODEX_AUTH_JSON", "CODEX_CHATGPT_AUTH_JSON"}

// loginPlan is who owns the login, why the daemon thinks so, and where a login the platform
// owns is read from.
type loginPlan struct {
	owner   string // codexauth.Owner*
	why     string
	sources []codexauth.Source
}

// loginInputs is what planLogin looks at.
type loginInputs struct {
	mode string
	// env holds the values of platformLoginEnv the daemon was started with (read before they
	// were removed from its environment).
	env map[string]string
	// platform is the Molecule inbox's configuration, nil when the daemon runs another inbox.
	platform  *molecule.Config
	codexHome string
	// secrets learns every generation of the platform's login any source gives.
	secrets *secretset.Set
}

// planLogin decides who owns the login. A login the platform provides is the platform's under
// auto: CODEX_AUTH_JSON in the environment, or in the workspace's secrets while CODEX_HOME holds
// a ChatGPT login (the codex image syncs the secret there; without one, codex runs on its own
// credentials, which auto leaves alone). When the secrets
// cannot be read at start and CODEX_HOME holds a ChatGPT login, auto takes the safe side and
// treats it as the platform's (it never refreshes it), saying how to claim it. An error means the plan cannot hold:
// platform with no platform login, or off with one (each child would spend the org's token).
func planLogin(ctx context.Context, in loginInputs, log *zap.Logger) (loginPlan, error) {
	if in.mode == tokensOwn {
		return loginPlan{owner: codexauth.OwnerDaemon, why: "--chatgpt-tokens own"}, nil
	}
	var sources []codexauth.Source
	var found []string
	for _, k := range platformLoginEnv {
		if v := in.env[k]; v != "" {
			sources = append(sources, staticSource("environment ("+k+")", []byte(v)))
			found = append(found, k+" in the environment")
			break
		}
	}
	fromEnv := len(found) > 0
	var unsure error
	if in.platform != nil {
		sr, err := molecule.NewSecretsReader(*in.platform)
		if err != nil {
			return loginPlan{}, fmt.Errorf("read the platform's secrets: %w", err)
		}
		src := secretsSource(sr)
		switch _, err := src.Read(ctx); {
		case err == nil:
			found = append(found, molecule.CodexAuthSecret+" in the workspace's platform secrets")
			sources = append(sources, src)
		case errors.Is(err, codexauth.ErrNoLogin):
		default:
			unsure = err
			sources = append(sources, src)
		}
	}
	platform := len(found) > 0
	synced := authFileSource(in.codexHome)
	_, syncedErr := synced.Read(ctx)
	hasChatGPT := syncedErr == nil
	if platform && !fromEnv && !hasChatGPT && in.mode == tokensAuto {
		// The org offers its login in the secrets, but nothing put it in CODEX_HOME (the codex
		// image's sync would have): codex here runs on its own credentials (an API key, a
		// provider's key), which auto leaves alone.
		log.Info("the workspace's platform secrets hold CODEX_AUTH_JSON but CODEX_HOME holds no ChatGPT login: codex keeps its own credentials "+
			"(--chatgpt-tokens platform uses the platform's login)", zap.String("codex_home", in.codexHome))
		platform = false
	}
	if !platform && unsure != nil && in.mode != tokensOff && hasChatGPT {
		// The safe side: a ChatGPT login that may be the org's is never refreshed.
		platform = true
		found = append(found, "the workspace's platform secrets could not be read ("+unsure.Error()+"); "+
			"a Molecule workspace's login may be the org's, so the daemon does not refresh it (--chatgpt-tokens own claims it)")
	}
	why := strings.Join(found, "; ")
	switch {
	case in.mode == tokensOff && platform:
		return loginPlan{}, fmt.Errorf("--chatgpt-tokens off with a ChatGPT login the platform owns (%s): each codex child "+
			"would refresh it on its own and spend the org's single-use refresh token; use --chatgpt-tokens auto or platform", why)
	case in.mode == tokensOff:
		return loginPlan{owner: codexauth.OwnerChild, why: "--chatgpt-tokens off"}, nil
	case in.mode == tokensPlatform && !platform:
		return loginPlan{}, errors.New("--chatgpt-tokens platform: the platform provides no ChatGPT login (no CODEX_AUTH_JSON in the environment" +
			" nor in the Molecule workspace's secrets)")
	case !platform:
		return loginPlan{owner: codexauth.OwnerDaemon, why: "no login from the platform"}, nil
	}
	if unsure != nil {
		log.Warn("could not read the workspace's platform secrets at start; they are read again with the platform's login", zap.Error(unsure))
	}
	// The auth.json the platform's sync writes (codex_auth_sync.sh) is one more source.
	sources = append(sources, synced)
	for i := range sources {
		sources[i] = learningSource(in.secrets, sources[i])
	}
	return loginPlan{owner: codexauth.OwnerPlatform, why: why, sources: sources}, nil
}

// staticSource is a login given once (the environment).
func staticSource(name string, doc []byte) codexauth.Source {
	return codexauth.Source{Name: name, Read: func(context.Context) ([]byte, error) { return doc, nil }}
}

// secretsSource reads CODEX_AUTH_JSON from the workspace's platform secrets.
func secretsSource(sr *molecule.SecretsReader) codexauth.Source {
	return codexauth.Source{Name: "platform secrets", Read: func(ctx context.Context) ([]byte, error) {
		v, err := sr.Secret(ctx, molecule.CodexAuthSecret)
		if errors.Is(err, molecule.ErrNoSecret) {
			return nil, fmt.Errorf("%w: %w", codexauth.ErrNoLogin, err)
		}
		return []byte(v), err
	}}
}

// authFileSource reads codexHome/auth.json as the platform's sync leaves it.
func authFileSource(codexHome string) codexauth.Source {
	path := filepath.Join(codexHome, codexauth.AuthFile)
	return codexauth.Source{Name: "auth.json synced from the platform", Read: func(context.Context) ([]byte, error) {
		doc, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist", codexauth.ErrNoLogin, path)
		}
		if err != nil {
			return nil, err
		}
		if _, err := codexauth.ParseLogin(doc); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", codexauth.ErrNoLogin, path, err)
		}
		return doc, nil
	}}
}

// platformEnv is the values of platformLoginEnv in secrets (the variables the daemon took out of
// its environment).
func platformEnv(secrets map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range platformLoginEnv {
		if v := secrets[k]; v != "" {
			out[k] = v
		}
	}
	return out
}
