package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/molecule-ai/codex-warm/internal/demo"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
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
	demo.MockUsage(stdout, m, home)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Fprintf(stdout, "mock model stopped after %d requests\n", m.RequestCount())
	return nil
}
