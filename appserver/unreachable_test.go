package appserver

import (
	"encoding/json"
	"testing"

	"github.com/molecule-ai/codex-warm/internal/protocol"
)

func TestModelUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		method       string
		want         bool
		cause        string
	}{
		{"recorded refused connection", `{"error":{"additionalDetails":"Connection failed: error sending request","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}},"message":"Reconnecting... waiting for network"},"willRetry":true,"threadId":"t","turnId":"u"}`,
			protocol.NotifyError, true, "Connection failed: error sending request"},
		{"connection failed kind, no details", `{"error":{"codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":null}},"message":"stream error"},"willRetry":true}`,
			protocol.NotifyError, true, "stream error"},
		{"an HTTP status means the model answered", `{"error":{"codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":502}},"message":"bad gateway"},"willRetry":true}`,
			protocol.NotifyError, false, ""},
		{"no retry: the turn fails anyway", `{"error":{"codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}},"message":"x"},"willRetry":false}`,
			protocol.NotifyError, false, ""},
		{"another kind", `{"error":{"codexErrorInfo":"usageLimitExceeded","message":"x"},"willRetry":true}`,
			protocol.NotifyError, false, ""},
		{"not an error notification", `{"error":{"codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}}},"willRetry":true}`,
			protocol.NotifyTurnCompleted, false, ""},
		{"garbage", `[1,2`, protocol.NotifyError, false, ""},
	} {
		cause, ok := ModelUnreachable(protocol.Notification{Method: tc.method, Params: json.RawMessage(tc.params)})
		if ok != tc.want || cause != tc.cause {
			t.Errorf("%s: ModelUnreachable = %q, %v; want %q, %v", tc.name, cause, ok, tc.cause, tc.want)
		}
	}
}
