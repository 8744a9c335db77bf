package appservertest

import (
	"encoding/json"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// TurnNotifications returns the notifications of a turn that ended with status: a completed
// final_answer agentMessage carrying reply (none when reply is ""), then turn/completed. A fake
// Child puts them in its appserver.TurnResult, so that the daemon derives the reply from them
// (projector.Project) the way it does for a real child.
func TurnNotifications(threadID, turnID, status, reply string) []protocol.Notification {
	var out []protocol.Notification
	var items []json.RawMessage
	if reply != "" {
		phase := protocol.PhaseFinalAnswer
		item := mustJSON(protocol.Item{Type: protocol.ItemAgentMessage, ID: "msg-" + turnID, Text: reply, Phase: &phase})
		out = append(out, protocol.Notification{Method: protocol.NotifyItemCompleted,
			Params: mustJSON(protocol.ItemNotification{ThreadID: threadID, TurnID: turnID, Item: item})})
		items = append(items, item)
	}
	return append(out, protocol.Notification{Method: protocol.NotifyTurnCompleted,
		Params: mustJSON(protocol.TurnNotification{ThreadID: threadID,
			Turn: protocol.Turn{ID: turnID, Status: status, Items: items}})})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the protocol types always marshal
	}
	return b
}
