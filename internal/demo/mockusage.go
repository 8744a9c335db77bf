package demo

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// MockUsage tells a newcomer what to do with the running mock model m (`supervisor
// mock-model`), whose config.toml was written into home ("" when not).
func MockUsage(w io.Writer, m *mockmodel.Model, home string) {
	transport := "the Responses websocket, and HTTP + SSE"
	if !m.ServesWebsocket() {
		transport = "HTTP + SSE only"
	}
	fmt.Fprintf(w, "mock model listening on %s, %s (Ctrl-C stops it)\n", m.URL(), transport)
	fmt.Fprintln(w, `it answers every message with "reply #N: <your text>", N counting the chat's messages`)
	fmt.Fprintln(w)
	shownHome := home
	if home == "" {
		shownHome = "$HOME/.codex-mock"
		fmt.Fprintln(w, "Put this in a CODEX_HOME of its own as config.toml (or pass --codex-home DIR to have it written):")
	} else {
		fmt.Fprintf(w, "Wrote %s:\n", filepath.Join(home, "config.toml"))
	}
	fmt.Fprintln(w)
	for _, l := range strings.Split(strings.TrimRight(m.CodexConfig(), "\n"), "\n") {
		if l != "" {
			l = "    " + l
		}
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "No login is needed: the mock provider brings its own credentials. In another terminal:")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "    export CODEX_HOME=%s\n", shownHome)
	fmt.Fprintln(w, "    supervisor doctor --inbox local")
	fmt.Fprintln(w, "    supervisor run --inbox local --listen 127.0.0.1:8377")
	fmt.Fprintln(w, `    curl -s localhost:8377/v1/chats/peer:alice/messages -H 'Content-Type: application/json' -d '{"text":"hello"}'`)
	fmt.Fprintln(w)
}
