package inbound

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/molecule-ai/codex-warm/bridge/molecule/ledger"
	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
)

// A delegate_result row as the platform writes it (source_id: this workspace, the callee in
// target_id, the text in response_body.text) is the callee's result: codex reads it in the
// callee's chat, the reply goes to the canvas. A failed one says so, with its error capped.
func TestNormalizeDelegationRealShape(t *testing.T) {
	t.Parallel()
	cfg := normCfg()
	for _, tc := range []struct {
		name      string
		row       moleculetest.Row
		key, want string
		absent    string
	}{
		{"result", moleculetest.DelegationResult(testWS, "callee-1", "d-1", "the answer is 42"), "peer:callee-1",
			"Result of the work delegated to workspace callee-1 (delegation d-1):\n\nthe answer is 42", ""},
		{"failed", moleculetest.DelegationFailed(testWS, "callee-2", "d-2", "target unreachable"), "peer:callee-2",
			"The work delegated to workspace callee-2 (delegation d-2) failed: target unreachable", "Delegation failed"},
		{"failed without a detail", moleculetest.DelegationFailed(testWS, "callee-2", "d-3", ""), "peer:callee-2",
			"The work delegated to workspace callee-2 (delegation d-3) failed: no reason given", ""},
		{"no callee (reported through the status API)", moleculetest.DelegationResult(testWS, "", "d-4", "done"), "oneoff:a1",
			"Result of the work delegated to another workspace (delegation d-4):\n\ndone", ""},
		{"empty result", moleculetest.DelegationResult(testWS, "callee-1", "d-5", ""), "peer:callee-1",
			"The work delegated to workspace callee-1 (delegation d-5) finished without a result text (Delegation result delivered).", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := Normalize(rowJSON(t, tc.row.WithID("a1")), cfg)
			m := n.Msg
			if n.Disp != DispMessage || m.Kind != KindDelegationResult || m.ChatKey != tc.key || m.Route != (ledger.Route{Kind: RouteNotify, Workspace: testWS}) {
				t.Fatalf("got %s (%s) kind=%s key=%q route=%+v, want a delegation result in %q answered on the canvas",
					n.Disp, n.Reason, m.Kind, m.ChatKey, m.Route, tc.key)
			}
			if m.Text != tc.want {
				t.Fatalf("text = %q, want %q", m.Text, tc.want)
			}
		})
	}
	long := strings.Repeat("e", 3*maxDelegationErrorBytes)
	cfg.MaxTextBytes = 64 << 10
	n := Normalize(rowJSON(t, moleculetest.DelegationFailed(testWS, "callee-2", "d-6", long).WithID("a2")), cfg)
	if got := strings.Count(n.Msg.Text, "e"); got > maxDelegationErrorBytes || got < maxDelegationErrorBytes/2 || !strings.Contains(n.Msg.Text, "failed: ") {
		t.Fatalf("a %d-byte error_detail gave codex %d bytes of it, want it capped at %d: %.200q", len(long), got, maxDelegationErrorBytes, n.Msg.Text)
	}
}

// rowJSON encodes a fake platform row as the activity page carries it.
func rowJSON(t *testing.T, r moleculetest.Row) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
