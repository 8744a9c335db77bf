// Command gen writes the wire-contract snapshot of package schema from a codex binary:
// app-server.schema.json (the app-server schema trimmed to the contract's closure) and
// features.txt (`codex features list`). `make codex-snapshot` runs it on the pinned codex.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/molecule-ai/codex-warm/internal/protocol/schema"
)

func main() {
	bin := flag.String("codex-bin", os.Getenv("CODEX_BIN"), "the native codex binary (default $CODEX_BIN)")
	out := flag.String("out", ".", "the directory to write the snapshot into")
	flag.Parse()
	if err := run(context.Background(), *bin, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, out string) error {
	if bin == "" {
		return fmt.Errorf("no codex: pass -codex-bin or set CODEX_BIN (`make -s codex-bin` prints the pinned one)")
	}
	full, err := schema.Generate(ctx, bin)
	if err != nil {
		return err
	}
	c := schema.DaemonContract()
	snap := full.Trim(c)
	if v := c.Check(snap); len(v) > 0 {
		return fmt.Errorf("codex %s breaks the contract; fix the daemon or the contract first: %v", full.CodexVersion, v)
	}
	b, err := snap.Marshal()
	if err != nil {
		return err
	}
	features, err := schema.ListFeatures(ctx, bin)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, schema.SnapshotFile), b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, schema.FeaturesFile), []byte(features.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%d definitions, %d methods) and %s (%d features) from codex %s\n", schema.SnapshotFile,
		len(snap.Definitions), len(snap.Methods), schema.FeaturesFile, len(features), full.CodexVersion)
	return nil
}
