package mockmodel

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WriteCodexHome writes dir/config.toml so that codex run with CODEX_HOME=dir uses this mock as
// its only model provider and stays offline. dir must exist. codex talks to the mock on its
// Responses websocket (supports_websockets = true, as with the built-in openai provider) unless
// Config.HTTPOnly. With Config.TLS, codex must also run with SSL_CERT_FILE naming the CA that
// WriteCA writes.
func (m *Model) WriteCodexHome(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(m.CodexConfig()), 0o600); err != nil {
		return fmt.Errorf("mock model: write codex home: %w", err)
	}
	return nil
}

// CodexConfig is the config.toml WriteCodexHome writes: this mock as codex's only model
// provider, which needs no login, and codex kept offline.
func (m *Model) CodexConfig() string {
	return fmt.Sprintf(codexConfigTemplate, "", strconv.Quote(m.url), m.transportLines())
}

// WriteCodexHomeVia is WriteCodexHome for a codex that reaches the mock through a proxy at
// hostport (a TCP relay: TLS stays end to end, and the mock's certificate covers 127.0.0.1).
func (m *Model) WriteCodexHomeVia(dir, hostport string) error {
	u, err := url.Parse(m.url)
	if err != nil {
		return fmt.Errorf("mock model: write codex home: %w", err)
	}
	u.Host = hostport
	conf := fmt.Sprintf(codexConfigTemplate, "", strconv.Quote(u.String()), m.transportLines())
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("mock model: write codex home: %w", err)
	}
	return nil
}

// WriteCodexHomeChatGPT is WriteCodexHome for a provider that needs codex's OpenAI login, as
// the built-in openai provider does: codex sends the ChatGPT access token of its login to the
// mock as the bearer (see Config.Authorize). codex's ChatGPT backend calls go to the mock too
// (and are answered 404), so nothing leaves the machine.
func (m *Model) WriteCodexHomeChatGPT(dir string) error {
	root := strings.TrimSuffix(m.url, "/v1")
	conf := fmt.Sprintf(codexConfigTemplate, "chatgpt_base_url = "+strconv.Quote(root+"/backend-api/")+"\n",
		strconv.Quote(m.url), m.transportLines()+"requires_openai_auth = true\n")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("mock model: write codex home: %w", err)
	}
	return nil
}

// ServesWebsocket reports whether the mock serves the Responses websocket and points codex at it
// (false with Config.HTTPOnly).
func (m *Model) ServesWebsocket() bool { return !m.cfg.HTTPOnly }

// transportLines are the provider lines that choose codex's transport: the websocket, as the
// built-in openai provider uses, unless Config.HTTPOnly.
func (m *Model) transportLines() string {
	if !m.ServesWebsocket() {
		return ""
	}
	return "supports_websockets = true\n"
}

// codexConfigTemplate is the CODEX_HOME config for tests: top-level lines, the quoted base URL,
// and more provider lines.
//
// Besides the provider, it switches off what codex 0.169.0 reaches for on its own at startup
// (observed with strace on a bare CODEX_HOME): the plugin marketplace sync (`git ls-remote
// https://github.com/openai/plugins.git`, DNS for github.com, api.github.com, chatgpt.com), the
// analytics exporter (ab.chatgpt.com), and the login-shell snapshot (a `bash -lc` that sources
// ~/.bashrc on every start). The update check is off too; it only matters for the TUI. Every key
// passes `codex --strict-config`, which a test checks.
const codexConfigTemplate = `# Written by mockmodel.Model.WriteCodexHome: codex talks only to the local mock.
model = "mock-model"
model_provider = "mock"
check_for_update_on_startup = false
%s
[analytics]
enabled = false

[features]
plugins = false
shell_snapshot = false

[model_providers.mock]
name = "mock"
base_url = %s
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
%s`
