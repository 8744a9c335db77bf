package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/molecule-ai/codex-warm/childproc"
	"github.com/molecule-ai/codex-warm/control"
	"github.com/molecule-ai/codex-warm/health"
)

// cmdStatus prints the running daemon's status: its process table (control.Render), or with
// --json the document itself, or with --health / --ready only its probe.
func cmdStatus(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newCommandFlags("status", stderr)
	stateDir := fs.String("state-dir", defaultStateDir(getenv), "state directory of the daemon (env CODEX_CHANNEL_MOLECULE_STATE_DIR)")
	asJSON := fs.Bool("json", false, "print the raw status document as JSON")
	live := fs.Bool("health", false, "only ask the daemon's liveness probe (/healthz): exit 0 when it answers")
	ready := fs.Bool("ready", false, "only ask the daemon's readiness probe (/readyz): exit 0 when ready, 1 with the reason when not")
	if err := fs.Parse(args); err != nil {
		return flagsError(err)
	}
	if *live || *ready {
		return probeDaemon(ctx, *stateDir, *ready, stdout, stderr)
	}
	doc, err := control.NewClient(*stateDir).Status(ctx)
	if err != nil {
		return newStatusFailure(*stateDir, err).report(stdout, stderr, *asJSON)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	control.Render(stdout, doc, time.Now())
	return nil
}

// probeDaemon asks the daemon's control socket for its liveness (or, with ready, readiness)
// probe and prints the answer: exit 0 when live / ready, 1 when not, 3 when no daemon runs, 4
// when what answered is not the daemon's probe (statusExit*).
// It needs neither the inbox's address nor its token, which makes it the container's
// HEALTHCHECK.
func probeDaemon(ctx context.Context, stateDir string, ready bool, stdout, stderr io.Writer) error {
	verb := control.VerbLive
	if ready {
		verb = control.VerbReady
	}
	c := control.NewClient(stateDir)
	code, body, err := c.Do(ctx, verb, nil, health.DefaultTimeout+5*time.Second)
	if err != nil {
		return newStatusFailure(stateDir, err).report(stdout, stderr, false)
	}
	if !ready {
		if code != http.StatusOK {
			fmt.Fprintf(stderr, "supervisor status: the daemon's liveness probe answered HTTP %d: %s\n", code, capBytes(bytes.TrimSpace(body), 4096))
			return exitCode(statusExitNotReady)
		}
		fmt.Fprintln(stdout, "ok")
		return nil
	}
	var rep health.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		err = fmt.Errorf("the readiness probe at %s answered HTTP %d: %s", c.Path(), code, capBytes(bytes.TrimSpace(body), 4096))
		return newStatusFailure(stateDir, err).report(stdout, stderr, false)
	}
	if rep.Ready() {
		fmt.Fprintln(stdout, health.StatusReady)
		return nil
	}
	fmt.Fprintf(stdout, "%s: %s\n", health.StatusNotReady, rep.Reason)
	return exitCode(statusExitNotReady)
}

// status is what `supervisor status` shows of the running daemon.
func (d *daemon) status() StatusDoc {
	doc := StatusDoc{Daemon: d.info, Snapshot: d.sup.Status()}
	doc.Daemon.LastReload = d.reloadInfo()
	doc.Daemon.Goroutines = runtime.NumGoroutine()
	if m, err := (childproc.ProcFS{}).Memory(os.Getpid()); err == nil {
		doc.Daemon.RSSBytes, doc.Daemon.PSSBytes, doc.Daemon.USSBytes = m.RSS, m.PSS, m.USS
	} else {
		doc.Daemon.RSSBytes = childproc.ProcFS{}.RSS(os.Getpid())
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	doc.Daemon.HeapBytes = ms.HeapAlloc
	if mol := d.molecule(); mol != nil {
		st := mol.Stats()
		doc.Bridge = &st
	}
	if d.local != nil {
		f := d.local.Files()
		doc.LocalFiles = &f
	}
	d.addCodexStatus(&doc)
	return doc
}
