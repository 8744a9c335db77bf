package molecule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/chat/chattest"
)

func TestMoleculeConfigFromEnv(t *testing.T) {
	t.Parallel()
	configs := t.TempDir()
	must(t, os.WriteFile(filepath.Join(configs, ".auth_token"), []byte("file-token\n"), 0o600))
	emptyConfigs := t.TempDir()
	must(t, os.WriteFile(filepath.Join(emptyConfigs, ".auth_token"), []byte("  \n"), 0o600))

	base := map[string]string{
		"PLATFORM_URL":             "https://platform.example:8080/",
		"WORKSPACE_ID":             "ws-1",
		"MOLECULE_WORKSPACE_TOKEN": "env-token",
		"HOME":                     "/home/u",
		"CONFIGS_DIR":              t.TempDir(),
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "complete", env: with("MOLECULE_ORG_ID", "org-1"), check: func(t *testing.T, c Config) {
			if c.PlatformURL != "https://platform.example:8080/" || c.WorkspaceID != "ws-1" || c.Token != "env-token" || c.OrgID != "org-1" {
				t.Errorf("config = %+v", c)
			}
			if c.StateDir != "/home/u/.codex-channel-molecule" {
				t.Errorf("state dir = %q", c.StateDir)
			}
		}},
		{name: "state dir override", env: with("CODEX_CHANNEL_MOLECULE_STATE_DIR", "/var/lib/x"), check: func(t *testing.T, c Config) {
			if c.StateDir != "/var/lib/x" {
				t.Errorf("state dir = %q", c.StateDir)
			}
		}},
		{name: "token from CONFIGS_DIR", env: with("MOLECULE_WORKSPACE_TOKEN", "", "CONFIGS_DIR", configs), check: func(t *testing.T, c Config) {
			if c.Token != "file-token" {
				t.Errorf("token = %q", c.Token)
			}
		}},
		// As the runtime's platform_auth.get_token: the platform writes and rotates the file.
		{name: "file token wins over env", env: with("CONFIGS_DIR", configs), check: func(t *testing.T, c Config) {
			if c.Token != "file-token" || c.TokenFile != filepath.Join(configs, ".auth_token") {
				t.Errorf("token = %q, file %q", c.Token, c.TokenFile)
			}
		}},
		// The runtime sets MOLECULE_WORKSPACE_TOKEN_FILE: it replaces <configs>/.auth_token.
		{name: "token file variable", env: with("MOLECULE_WORKSPACE_TOKEN_FILE", filepath.Join(configs, ".auth_token"), "CONFIGS_DIR", emptyConfigs),
			check: func(t *testing.T, c Config) {
				if c.Token != "file-token" || c.TokenFile != filepath.Join(configs, ".auth_token") {
					t.Errorf("token = %q, file %q", c.Token, c.TokenFile)
				}
			}},
		{name: "token file variable names a missing file", env: with("MOLECULE_WORKSPACE_TOKEN", "", "MOLECULE_WORKSPACE_TOKEN_FILE", filepath.Join(configs, "absent"), "CONFIGS_DIR", configs),
			wantErr: "MOLECULE_WORKSPACE_TOKEN_FILE"},
		{name: "token variable beside a token file variable not written yet", env: with("MOLECULE_WORKSPACE_TOKEN_FILE", filepath.Join(configs, "later")),
			check: func(t *testing.T, c Config) {
				if c.Token != "env-token" || c.TokenFile != filepath.Join(configs, "later") {
					t.Errorf("token = %q, file %q: want the variable's token, rotation watched in the named file", c.Token, c.TokenFile)
				}
			}},
		{name: "canonical variables alone", env: map[string]string{
			"MOLECULE_API_URL": "https://api.example", "MOLECULE_WORKSPACE_ID": "ws-9",
			"MOLECULE_WORKSPACE_TOKEN": "env-token", "HOME": "/home/u", "CONFIGS_DIR": t.TempDir(),
		}, check: func(t *testing.T, c Config) {
			if c.PlatformURL != "https://api.example" || c.WorkspaceID != "ws-9" || c.Token != "env-token" {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "canonical names win over aliases", env: with("MOLECULE_API_URL", "https://canonical.example", "MOLECULE_URL", "https://second.example",
			"MOLECULE_PLATFORM_URL", "https://last.example", "MOLECULE_WORKSPACE_ID", "ws-canonical"), check: func(t *testing.T, c Config) {
			if c.PlatformURL != "https://canonical.example" || c.WorkspaceID != "ws-canonical" {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "aliases in contract order", env: with("PLATFORM_URL", "", "MOLECULE_PLATFORM_URL", "https://last.example", "MOLECULE_URL", "https://second.example"), check: func(t *testing.T, c Config) {
			if c.PlatformURL != "https://second.example" {
				t.Errorf("platform url = %q", c.PlatformURL)
			}
		}},
		{name: "last alias alone", env: with("PLATFORM_URL", "", "MOLECULE_PLATFORM_URL", "https://last.example"), check: func(t *testing.T, c Config) {
			if c.PlatformURL != "https://last.example" {
				t.Errorf("platform url = %q", c.PlatformURL)
			}
		}},
		{name: "configs dir defaults to home", env: with("CONFIGS_DIR", ""), check: func(t *testing.T, c Config) {
			// /configs does not exist on a test machine; if it does and is writable it is used.
			if c.TokenFile != "/home/u/.molecule-workspace/.auth_token" && c.TokenFile != "/configs/.auth_token" {
				t.Errorf("token file = %q", c.TokenFile)
			}
		}},
		{name: "no token anywhere", env: with("MOLECULE_WORKSPACE_TOKEN", "", "CONFIGS_DIR", t.TempDir()), wantErr: "MOLECULE_WORKSPACE_TOKEN is not set and"},
		{name: "empty token file", env: with("MOLECULE_WORKSPACE_TOKEN", "", "CONFIGS_DIR", emptyConfigs), wantErr: "is empty"},
		{name: "empty token file, env token", env: with("CONFIGS_DIR", emptyConfigs), check: func(t *testing.T, c Config) {
			if c.Token != "env-token" {
				t.Errorf("token = %q", c.Token)
			}
		}},
		{name: "missing platform url", env: with("PLATFORM_URL", ""), wantErr: "MOLECULE_API_URL (or PLATFORM_URL) is not set"},
		{name: "platform url not http", env: with("PLATFORM_URL", "ftp://x"), wantErr: "http or https"},
		{name: "platform url with user info", env: with("PLATFORM_URL", "https://u:p@x"), wantErr: "user info"},
		{name: "missing workspace id", env: with("WORKSPACE_ID", ""), wantErr: "MOLECULE_WORKSPACE_ID (or WORKSPACE_ID) is not set"},
		{name: "uppercase workspace id", env: with("WORKSPACE_ID", "WS-1"), wantErr: "WORKSPACE_ID \"WS-1\" is invalid"},
		{name: "workspace id with slash", env: with("WORKSPACE_ID", "ws/1"), wantErr: "is invalid"},
		{name: "workspace id leading dash", env: with("WORKSPACE_ID", "-ws"), wantErr: "is invalid"},
		{name: "workspace id too long", env: with("WORKSPACE_ID", strings.Repeat("a", 129)), wantErr: "is invalid"},
		{name: "no home and no state dir", env: with("HOME", ""), wantErr: "HOME"},
		{name: "org id with newline", env: with("MOLECULE_ORG_ID", "a\nb"), wantErr: "line break"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ConfigFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "env-token") || strings.Contains(err.Error(), "file-token") {
					t.Fatalf("error leaks the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			tc.check(t, c)
		})
	}
}

func TestNewMoleculeValidates(t *testing.T) {
	t.Parallel()
	good := Config{PlatformURL: "http://127.0.0.1:1", WorkspaceID: "ws-1", Token: "tok-123456", StateDir: t.TempDir(), Answerer: chattest.NewAnswerer(nil)}
	if _, err := New(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no answerer":  func(c *Config) { c.Answerer = nil },
		"no token":     func(c *Config) { c.Token = "" },
		"bad ws":       func(c *Config) { c.WorkspaceID = "A" },
		"no url":       func(c *Config) { c.PlatformURL = "" },
		"no state dir": func(c *Config) { c.StateDir = "" },
	} {
		c := good
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
