package appserver

import (
	"encoding/json"
	"strings"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// ModelUnreachable is the one place that decides whether a notification is codex saying it
// cannot reach the model and is trying again: an error notification with willRetry whose kind
// is a connection failure without an HTTP status (nothing answered). It returns codex's account
// of the cause ("Connection failed: error sending request").
//
// Wire facts (codex 0.169, docs/PROTOCOL.md): with the model's endpoint unreachable (refused,
// DNS, TLS, proxy) codex sends {"error": {"message": "Reconnecting... waiting for network",
// "additionalDetails": "Connection failed: …", "codexErrorInfo": {"responseStreamDisconnected":
// {"httpStatusCode": null}}}, "willRetry": true} at once and again after about 7, 17, 37 s, and
// never gives up, even with request_max_retries = 0. A model that answers, however slowly or
// with an HTTP error, is reachable.
func ModelUnreachable(n protocol.Notification) (cause string, ok bool) {
	if n.Method != protocol.NotifyError {
		return "", false
	}
	var en protocol.ErrorNotification
	if json.Unmarshal(n.Params, &en) != nil || !en.WillRetry {
		return "", false
	}
	switch kind, status := en.Error.Kind(); {
	case status != 0:
		return "", false
	case kind == protocol.CodexErrorResponseStreamDisconnected, kind == protocol.CodexErrorResponseStreamConnectionFailed,
		kind == protocol.CodexErrorHTTPConnectionFailed:
	default:
		return "", false
	}
	cause = en.Error.Message
	if en.Error.AdditionalDetails != nil && strings.TrimSpace(*en.Error.AdditionalDetails) != "" {
		cause = *en.Error.AdditionalDetails
	}
	return cause, true
}
