package appservertest

// The thread and turn objects the fake app-server answers with.

import (
	"crypto/rand"
	"encoding/hex"
)

func fakeThreadObj(id, cwd string) map[string]any {
	return map[string]any{"id": id, "sessionId": id, "cwd": cwd, "preview": "", "ephemeral": false,
		"modelProvider": "fake", "model": "fake-model", "status": map[string]any{"type": "idle"}}
}

func fakeTurnObj(id, status string, turnErr map[string]any, items []any, durationMs ...int64) map[string]any {
	if items == nil {
		items = []any{}
	}
	t := map[string]any{"id": id, "rootTurnId": id, "items": items, "status": status, "error": turnErr, "durationMs": nil}
	if len(durationMs) > 0 {
		t["durationMs"] = durationMs[0]
	}
	return t
}

// newUUID returns a random version-4 UUID; codex thread and turn ids look like UUIDs.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
