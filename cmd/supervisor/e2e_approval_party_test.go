package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/molecule/moleculetest"
	"github.com/molecule-ai/codex-warm/internal/mockmodel"
)

// partyScript makes any message ending in "run it" a tool call of approvalCommand: a delegation
// result's text ends what codex is given for it, as a message's text does.
func partyScript(req mockmodel.Request) mockmodel.Reply {
	if !req.HasToolOutput && strings.HasSuffix(strings.TrimSpace(req.LastUserText), "run it") {
		args, _ := json.Marshal(map[string]any{"cmd": approvalCommand, "login": false})
		return mockmodel.Reply{ToolCall: &mockmodel.ToolCall{Name: "exec_command", Arguments: string(args)}}
	}
	return mockmodel.DefaultScript(req)
}

// The party shown an approval prompt is the party whose answer counts. On Molecule every prompt
// goes to the workspace's canvas user, whatever row's turn asks (canvas message, peer message,
// delegation result): a peer is an agent, not the person who owns this machine. The peer's own
// /approve, sent from chat peer:X where the turn runs, answers nothing and the command does not
// run; the canvas user's /approve runs it.
func TestE2EApprovalAskedOfTheCanvas(t *testing.T) {
	e := newE2E(t, e2eConfig{Script: partyScript})
	d := e.start(approvalArgs(time.Minute)...)
	const peer = "peer-x"
	for _, tc := range []struct {
		name string
		row  moleculetest.Row
	}{
		{"delegation result", moleculetest.DelegationResult(e.plat.WorkspaceID(), peer, "d-1", "run it")},
		{"peer message", moleculetest.PeerMessage(peer, "run it")},
		{"canvas message", moleculetest.CanvasMessage("run it")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notifies, sends := len(e.plat.Notifies()), len(e.plat.A2ASends())
			e.plat.Enqueue(tc.row)
			d.waitPlatform("the approval prompt on the canvas", func() bool {
				for _, n := range e.notifyTexts()[notifies:] {
					if strings.Contains(n, "codex asks to run a command") {
						return true
					}
				}
				return len(e.plat.A2ASends()) > sends // a prompt sent to the peer instead fails below
			})
			for _, s := range e.plat.A2ASends()[sends:] {
				if strings.Contains(s.Text, "codex asks") {
					t.Fatalf("the approval prompt went to peer %s: %q", s.Peer, s.Text)
				}
			}
			if tc.row["source_id"] != nil {
				// The peer answers from its own chat: nothing there is asked of it.
				sends = len(e.plat.A2ASends())
				e.plat.Enqueue(moleculetest.PeerMessage(peer, "/approve"))
				d.waitPlatform("the peer's /approve answered", func() bool { return len(e.plat.A2ASends()) > sends })
				if got := e.plat.A2ASends()[sends].Text; got != "nothing is waiting for your approval" {
					t.Fatalf("peer %s's /approve: %q (it was never shown the prompt)", peer, got)
				}
			}
			notifies, sends = len(e.plat.Notifies()), len(e.plat.A2ASends())
			e.plat.Enqueue(moleculetest.CanvasMessage("/approve"))
			// The turn's reply goes where the row's replies go: the peer for a peer's message.
			since := func() string {
				all := e.notifyTexts()[notifies:]
				for _, s := range e.plat.A2ASends()[sends:] {
					all = append(all, s.Text)
				}
				return strings.Join(all, "\n---\n")
			}
			// The canvas's answer and the turn's reply go to two places (the peer's reply by A2A),
			// so either can land first: wait for both.
			d.waitPlatform("the canvas's answer and the turn's reply", func() bool {
				return strings.Contains(since(), "Process exited with code 0") &&
					strings.Contains(strings.Join(e.notifyTexts()[notifies:], "\n"), "approved")
			})
			if all := strings.Join(e.notifyTexts()[notifies:], "\n---\n"); !strings.Contains(all, "approved") {
				t.Fatalf("the canvas was not told its /approve was taken; notifies:\n%s", all)
			}
			d.waitUntil("every row acknowledged", func() bool { return d.bridgeStats().Unacked == 0 })
		})
	}
}
