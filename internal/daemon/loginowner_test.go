//go:build linux

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/molecule-ai/codex-warm/bridge/molecule"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/codexauth"
	"github.com/molecule-ai/codex-warm/internal/codexauth/codexauthtest"
)

// Who owns the login, for each mode and what the platform provides. The platform's secrets
// unreadable at start with a ChatGPT login in CODEX_HOME: auto takes the safe side.
func TestPlanLogin(t *testing.T) {
	p := moleculetest.NewPlatform(t, moleculetest.Config{})
	mcfg := molecule.Config{PlatformURL: p.URL(), WorkspaceID: p.WorkspaceID(), Token: p.Token()}
	withLogin, without := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(withLogin, codexauth.AuthFile), []byte(orgLogin()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		mode      string
		env       map[string]string
		secret    bool
		fail      bool // the secrets read fails (HTTP 500)
		home      string
		owner     string
		errSubstr string
	}{
		{"own", tokensOwn, map[string]string{"CODEX_AUTH_JSON": orgLogin()}, true, false, withLogin, codexauth.OwnerDaemon, ""},
		{"auto, env", tokensAuto, map[string]string{"CODEX_AUTH_JSON": orgLogin()}, false, false, without, codexauth.OwnerPlatform, ""},
		{"auto, alias env", tokensAuto, map[string]string{"CODEX_CHATGPT_AUTH_JSON": orgLogin()}, false, false, without, codexauth.OwnerPlatform, ""},
		{"auto, secrets and a synced login", tokensAuto, nil, true, false, withLogin, codexauth.OwnerPlatform, ""},
		{"auto, secrets and no ChatGPT login", tokensAuto, nil, true, false, without, codexauth.OwnerDaemon, ""},
		{"auto, nothing from the platform", tokensAuto, nil, false, false, withLogin, codexauth.OwnerDaemon, ""},
		{"auto, secrets unreadable, a ChatGPT login", tokensAuto, nil, false, true, withLogin, codexauth.OwnerPlatform, ""},
		{"auto, secrets unreadable, no ChatGPT login", tokensAuto, nil, false, true, without, codexauth.OwnerDaemon, ""},
		{"platform, secrets", tokensPlatform, nil, true, false, without, codexauth.OwnerPlatform, ""},
		{"platform, nothing", tokensPlatform, nil, false, false, withLogin, "", "provides no ChatGPT login"},
		{"off, nothing", tokensOff, nil, false, false, withLogin, codexauth.OwnerChild, ""},
		{"off, env", tokensOff, map[string]string{"CODEX_AUTH_JSON": orgLogin()}, false, false, withLogin, "", "spend the org's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.SetSecret(molecule.CodexAuthSecret, "")
			if tc.secret {
				p.SetSecret(molecule.CodexAuthSecret, orgLogin())
			}
			p.ClearFailures()
			if tc.fail {
				p.FailNext(moleculetest.RouteSecrets, 1, 500)
			}
			plan, err := planLogin(context.Background(), loginInputs{mode: tc.mode, env: tc.env, platform: &mcfg, codexHome: tc.home}, zap.NewNop())
			if tc.errSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSubstr) {
					t.Fatalf("plan %+v, err %v; want an error with %q", plan, err, tc.errSubstr)
				}
				return
			}
			if err != nil || plan.owner != tc.owner {
				t.Fatalf("owner %q (%s), err %v; want %q", plan.owner, plan.why, err, tc.owner)
			}
		})
	}
}

// orgLogin is an org's ChatGPT login document as the platform provides it.
func orgLogin() string {
	access := codexauthtest.JWT(map[string]any{"exp": time.Now().Add(time.Hour).Unix(),
		"https://api.openai.com/auth": map[string]any{"chatgpt_account_id": "acct-org", "chatgpt_plan_type": "pro"}})
	return string(codexauthtest.AuthDoc("", access, "rt-org", "acct-org"))
}
