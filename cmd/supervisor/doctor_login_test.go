//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

// orgLogin is a ChatGPT login as a Molecule platform holds it in CODEX_AUTH_JSON.
func orgLogin() string {
	access := codexauthtest.JWT(map[string]any{"exp": time.Now().Add(time.Hour).Unix(),
		"https://api.openai.com/auth": map[string]any{"chatgpt_account_id": "acct-org", "chatgpt_plan_type": "pro"}})
	return string(codexauthtest.AuthDoc("", access, "rt-org", "acct-org"))
}

// doctor says who owns the ChatGPT login, and refuses off with a login the platform owns: each
// child would refresh it on its own and spend the org's single-use refresh token.
func TestDoctorLoginOwner(t *testing.T) {
	t.Parallel()
	t.Run("off with the org's login in the environment", func(t *testing.T) {
		e := newDoctorEnv(t)
		e.env = append(e.env, "CODEX_AUTH_JSON="+orgLogin())
		r := e.run("--chatgpt-tokens", "off")
		r.expect(t, 1, "ChatGPT tokens", "✗", "--chatgpt-tokens off with a ChatGPT login the platform owns",
			"CODEX_AUTH_JSON in the environment", "auto or platform")
	})
	t.Run("auto with the org's login in the platform's secrets", func(t *testing.T) {
		e := newDoctorEnv(t)
		p := moleculetest.NewPlatform(t, moleculetest.Config{})
		p.SetSecret(molecule.CodexAuthSecret, orgLogin())
		p.SetSecret("OPENAI_API_KEY", "sk-other-secret")
		e.env = append(e.env, "PLATFORM_URL="+p.URL(), "WORKSPACE_ID="+p.WorkspaceID(), "MOLECULE_WORKSPACE_TOKEN="+p.Token())
		e.args = []string{"--codex-bin", e.codexBin, "--state-dir", e.stateDir}
		// Without a ChatGPT login in CODEX_HOME codex runs on its own credentials: auto leaves them.
		r := e.run()
		r.expect(t, 0, "ChatGPT tokens", "✓", "not a ChatGPT login")
		// The codex image's sync wrote the platform's login to auth.json.
		if err := os.WriteFile(filepath.Join(e.codexHome, "auth.json"), []byte(orgLogin()), 0o600); err != nil {
			t.Fatal(err)
		}
		r = e.run()
		r.expect(t, 0, "ChatGPT tokens", "✓", "owned by the platform", "CODEX_AUTH_JSON in the workspace's platform secrets",
			"plan pro", "never calls the token endpoint")
	})
	t.Run("own login readable by others", func(t *testing.T) {
		e := newDoctorEnv(t)
		if err := os.WriteFile(filepath.Join(e.codexHome, "auth.json"), []byte(orgLogin()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(e.codexHome, "auth.json"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := e.run()
		r.expect(t, 0, "ChatGPT tokens", "!", "readable by other users", "chmod 600")
	})
	t.Run("platform without a platform login", func(t *testing.T) {
		e := newDoctorEnv(t)
		r := e.run("--chatgpt-tokens", "platform")
		r.expect(t, 1, "ChatGPT tokens", "✗", "the platform provides no ChatGPT login")
	})
}
