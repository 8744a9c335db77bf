package main

import (
	"context"
	"time"

	"github.com/molecule-ai/codex-warm/internal/control"
)

// The end-to-end tests ask the daemon they started on its control socket through these.

const controlSocketName = control.SocketName

type (
	ReloadAnswer = control.ReloadAnswer
	StatusDoc    = control.StatusDoc
)

// fetchStatus asks the daemon owning dir for its status.
func fetchStatus(ctx context.Context, dir string) (StatusDoc, error) {
	return control.NewClient(dir).Status(ctx)
}

// controlDo sends method urlPath to the daemon owning dir and returns the HTTP status and body.
func controlDo(ctx context.Context, dir, method, urlPath string, timeout time.Duration) (int, []byte, error) {
	return control.NewClient(dir).Do(ctx, method+" "+urlPath, nil, timeout)
}
