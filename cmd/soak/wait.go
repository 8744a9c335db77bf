package main

import (
	"context"
	"time"

	"github.com/molecule-ai/codex-warm/cmd/internal/harness"
)

// pollUntil is harness.PollUntil, for procscan.go, which is being replaced in parallel by a
// shared /proc reader; once it is, delete this and call harness.PollUntil.
func pollUntil(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	return harness.PollUntil(ctx, interval, cond)
}
