package molecule

import (
	"github.com/molecule-ai/codex-warm/bridge/molecule/inbound"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// The inbox's names for package inbound's: what a platform row becomes (see there).
type (
	message         = inbound.Message
	normalized      = inbound.Normalized
	normalizeConfig = inbound.Config
	upload          = inbound.Upload
)

const (
	kindCanvasUser       = inbound.KindCanvasUser
	kindPeerAgent        = inbound.KindPeerAgent
	kindDelegationResult = inbound.KindDelegationResult

	routeNotify = inbound.RouteNotify
	routeA2A    = inbound.RouteA2A

	dispMessage = inbound.DispMessage
	dispEcho    = inbound.DispEcho
	dispPoison  = inbound.DispPoison

	methodUploadReceive = inbound.MethodUploadReceive
)

// codexInput is what codex gets for m.
func codexInput(m message) supervisor.Input {
	// The activity id names the row for good: a turn handed over by a reload is found by it
	// when the row is polled again.
	return supervisor.Input{Text: m.Text, Images: m.Images, Received: m.ReceivedAt, MessageID: m.ActivityID}
}
