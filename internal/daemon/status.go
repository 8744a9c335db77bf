package daemon

import (
	"os"
	"runtime"
	"syscall"

	"github.com/molecule-ai/codex-warm/internal/childproc"
	"github.com/molecule-ai/codex-warm/internal/control"
)

// requestStop asks the daemon to drain and exit as SIGTERM does (POST /v1/stop). The request
// goes where the signals go, so that a reload running meanwhile is called off by it exactly as
// by a signal; a stop asked again is the same stop (not the second signal that cuts the drain).
func (d *daemon) requestStop() {
	if !d.stopAsked.CompareAndSwap(false, true) {
		return
	}
	d.log.Info("stop asked on the control socket")
	select {
	case d.sigs <- syscall.SIGTERM:
	default: // a stop signal is already waiting
	}
}

// status is what `supervisor status` shows of the running daemon: its own figures and the
// pool's, then what each part adds (statusParts).
func (d *daemon) status() control.StatusDoc {
	doc := control.StatusDoc{Daemon: d.info, Snapshot: d.sup.Status()}
	for _, add := range d.statusParts() {
		add(&doc)
	}
	return doc
}

// statusParts are the parts' additions to the status document, in order. A part with figures
// or a readiness cause of its own adds its function here; it fills the document's Sections or
// NotReady, which control.Render prints as they are.
func (d *daemon) statusParts() []func(*control.StatusDoc) {
	return []func(*control.StatusDoc){d.addProcessStatus, d.addInboxStatus, d.addCodexStatus, d.addModelStatus}
}

// addProcessStatus adds the daemon process's own figures: its last reload, goroutines and
// memory.
func (d *daemon) addProcessStatus(doc *control.StatusDoc) {
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
}

// addInboxStatus adds the inbox's counters.
func (d *daemon) addInboxStatus(doc *control.StatusDoc) {
	if mol := d.molecule(); mol != nil {
		st := mol.Stats()
		doc.Bridge = &st
	}
	if d.local != nil {
		f := d.local.Files()
		doc.LocalFiles = &f
	}
}

// addModelStatus adds each chat's model and effort (/model, /effort).
func (d *daemon) addModelStatus(doc *control.StatusDoc) { doc.Models = chatModels(d.settings) }
