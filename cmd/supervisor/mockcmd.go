package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/molecule-ai/codex-warm/mockmodel"
)

// cmdMockModel runs the mock model the demo uses, on its own, until SIGINT or SIGTERM, and
// prints the CODEX_HOME config.toml that points codex at it and how to run the daemon with it.
func cmdMockModel(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("mock-model", stderr)
	listen := fs.String("listen", "127.0.0.1:8378", "loopback address to listen on (127.0.0.1:0 picks a free port)")
	codexHome := fs.String("codex-home", "", "also write config.toml into this directory (created 0700): a CODEX_HOME for the daemon")
	latency := fs.Duration("latency", 0, "delay every answer by this much (to watch busy children in `supervisor status`)")
	httpOnly := fs.Bool("http", false, "serve HTTP + SSE only and leave codex on it (default: codex uses the Responses websocket, as with OpenAI)")
	if err := fs.Parse(args); err != nil {
		return flagsError(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	m, err := mockmodel.New(mockmodel.Config{Addr: *listen, Latency: *latency, HTTPOnly: *httpOnly})
	if err != nil {
		return err
	}
	defer m.Close()

	home := *codexHome
	if home != "" {
		if home, err = filepath.Abs(home); err != nil {
			return err
		}
		if err := os.MkdirAll(home, 0o700); err != nil {
			return fmt.Errorf("create codex home: %w", err)
		}
		if err := m.WriteCodexHome(home); err != nil {
			return err
		}
	}
	printMockUsage(stdout, m, home)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Fprintf(stdout, "mock model stopped after %d requests\n", m.RequestCount())
	return nil
}

// printMockUsage tells a newcomer what to do with the running mock.
func printMockUsage(w io.Writer, m *mockmodel.Model, home string) {
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
