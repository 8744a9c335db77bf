package schema

import (
	"testing"

	"github.com/molecule-ai/codex-warm/appserver/appservertest"
)

// The codex under test (`make test CODEX_VERSION=X` tests X) keeps the daemon's wire contract.
// Its schema, trimmed as the snapshot is, is diffed against the snapshot: every change is
// logged for the person following a release; only the contract's violations fail. The pinned
// codex itself must reproduce the snapshot exactly (else `make codex-snapshot` was not run).
func TestWireContract(t *testing.T) {
	t.Parallel()
	bin := appservertest.CodexBin(t)
	snap := loadSnapshot(t)
	full, err := Generate(t.Context(), bin)
	if err != nil {
		t.Fatal(err)
	}
	c := DaemonContract()
	fresh := full.Trim(c)
	diff := Diff(snap, fresh)
	t.Logf("wire schema of codex %s against the snapshot of codex %s: %d changes", fresh.CodexVersion, snap.CodexVersion, len(diff))
	for _, l := range diff {
		t.Log("  " + l)
	}
	for _, v := range c.Check(fresh) {
		t.Errorf("codex %s breaks the wire contract: %s", fresh.CodexVersion, v)
	}
	if fresh.CodexVersion == snap.CodexVersion && len(diff) > 0 {
		t.Errorf("codex %s no longer gives its own snapshot (%d changes above): run `make codex-snapshot`", fresh.CodexVersion, len(diff))
	}
}

// The codex under test still has every feature the daemon and its tests set; every other
// change against the pinned codex's list (a default or a stage changed, a feature added or
// gone) is logged.
func TestFeatures(t *testing.T) {
	t.Parallel()
	bin := appservertest.CodexBin(t)
	snap := loadSnapshot(t)
	pinned, err := loadFeatures()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ListFeatures(t.Context(), bin)
	if err != nil {
		t.Fatal(err)
	}
	failures, notes := DaemonContract().DiffFeatures(pinned, got)
	t.Logf("features of the codex under test against those of codex %s: %d changes", snap.CodexVersion, len(failures)+len(notes))
	for _, n := range notes {
		t.Log("  " + n)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if got.String() == pinned.String() {
		return
	}
	full, err := Generate(t.Context(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if full.CodexVersion == snap.CodexVersion {
		t.Errorf("codex %s no longer lists the features of its snapshot: run `make codex-snapshot`", full.CodexVersion)
	}
}
