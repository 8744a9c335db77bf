package platform

// Replies out: notify to the canvas and A2A message/send to a peer. The wire facts are in
// docs/molecule.md ("Peers and delegation"), each with the platform source it was read from.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/molecule-ai/codex-warm/bridge/chat"
)

// DefaultPeerTurnTimeout is how long an A2A send waits for a push peer's answer: the platform
// holds the send until the peer's whole turn is over, and gives an agent caller 30 minutes by
// default (workspace-server a2a_proxy.go dispatchA2A). It is sent as X-Timeout, so the
// platform keeps the request (and its logging of the peer's answer) alive that long.
const DefaultPeerTurnTimeout = 30 * time.Minute

// a2aTimeoutGrace is how much longer than X-Timeout the daemon waits for the platform's
// answer, so that the platform, not the daemon, ends a send that takes too long: a tenth of
// X-Timeout, at most this.
const a2aTimeoutGrace = 2 * time.Minute

// maxRetryAfter bounds a Retry-After the daemon honours: the platform asks for 15 s or 30 s;
// a larger value from a proxy in between must not hold a reply for hours.
const maxRetryAfter = 10 * time.Minute

// textNoAnswer replaces an empty reply: the platform refuses an empty notify (400 "message is
// required"), and a peer would get a message with nothing in it.
const textNoAnswer = "(no answer text)"

// requestError is a platform call that got no answer. sent says the request had been written
// in full: the platform may have acted on it, so its fate is unknown. Otherwise it certainly did
// not (connection refused, no route, a write that failed part way).
type requestError struct {
	op, msg string
	sent    bool
}

func (e *requestError) Error() string { return e.op + ": " + e.msg }

// FateUnknown reports a failed attempt that may have landed anyway.
func FateUnknown(err error) bool {
	var re *requestError
	return errors.As(err, &re) && re.sent
}

// notify posts a reply to the canvas user of workspace ws. key is the reply's Idempotency-Key.
func (c *Client) Notify(ctx context.Context, ws, key, text string, files ...UploadedFile) error {
	body := map[string]any{"message": nonEmpty(c.secrets.Redact(text))}
	if len(files) > 0 {
		body["attachments"] = files
	}
	_, err := c.do(ctx, request{
		op: "notify", method: http.MethodPost,
		path:           "/workspaces/" + ws + "/notify",
		body:           body,
		idempotencyKey: key,
		class:          ClassReply,
	})
	return err
}

// nonEmpty is text, or textNoAnswer when it has nothing to read.
func nonEmpty(text string) string {
	if strings.TrimSpace(text) == "" {
		return textNoAnswer
	}
	return text
}

// replyMeta is what an A2A reply carries in params.message.metadata: the messageId of the
// message it answers. Neither the platform nor Molecule's runtime marks a reply (their sends
// carry no such field); this one lets a peer, and anyone reading the activity log, tell an
// automatic answer from a new message.
type replyMeta struct {
	InReplyTo string `json:"in_reply_to,omitempty"`
}

// A2AAnswer is how the platform took an A2A send it accepted (2xx).
type A2AAnswer struct {
	// How: "queued for a poll peer", "queued: peer busy", "answered by the peer" or
	// "accepted".
	How     string
	QueueID string
	// RPCErr is a JSON-RPC error the peer answered with; it was delivered all the same.
	RPCErr string
}

// a2aSend sends a reply to a peer agent as an A2A message/send. messageID (and key, the
// Idempotency-Key) stay the same across retries and runs of one reply: the platform
// deduplicates on params.message.messageId. The send carries X-Timeout and waits that long (and
// a grace) for the answer, since a push peer answers only after its whole turn. The answer of a
// push peer is its turn's reply to ours: it is logged, never taken as a new message (answering
// it would start two agents talking to each other without end).
func (c *Client) A2ASend(ctx context.Context, peer, messageID, key, inReplyTo, text string, files ...any) (A2AAnswer, error) {
	msg := map[string]any{
		"role":      "user",
		"messageId": messageID,
		"parts":     append([]any{map[string]string{"kind": "text", "text": nonEmpty(c.secrets.Redact(text))}}, files...),
	}
	if inReplyTo != "" {
		msg["metadata"] = replyMeta{InReplyTo: inReplyTo}
	}
	body := map[string]any{
		"jsonrpc": "2.0",
		"id":      NewUUID(),
		"method":  "message/send",
		"params":  map[string]any{"message": msg},
	}
	turn := c.peerTurn
	if turn <= 0 {
		turn = DefaultPeerTurnTimeout
	}
	resp, err := c.do(ctx, request{
		op: "a2a send", method: http.MethodPost,
		path:           "/workspaces/" + peer + "/a2a",
		body:           body,
		asSource:       true,
		idempotencyKey: key,
		timeout:        turn + min(a2aTimeoutGrace, turn/10),
		header:         map[string]string{"X-Timeout": strconv.Itoa(int(turn / time.Second))},
		class:          ClassReply,
	})
	if err != nil {
		return A2AAnswer{}, err
	}
	return c.readA2AAnswer(resp), nil
}

// readA2AAnswer classifies an accepted send's answer body (docs/molecule.md).
func (c *Client) readA2AAnswer(body []byte) A2AAnswer {
	var ans struct {
		Status  string          `json:"status"`
		Queued  bool            `json:"queued"`
		QueueID string          `json:"queue_id"`
		JSONRPC string          `json:"jsonrpc"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &ans) != nil {
		return A2AAnswer{How: "accepted"}
	}
	switch {
	case ans.Error != nil:
		return A2AAnswer{How: "answered by the peer", RPCErr: c.secrets.Redact(fmt.Sprintf("JSON-RPC error %d: %s",
			ans.Error.Code, chat.CapText(ans.Error.Message, maxErrorSnippet)))}
	case ans.Queued:
		return A2AAnswer{How: "queued: peer busy", QueueID: chat.CapText(ans.QueueID, 80)}
	case ans.Status == "queued":
		return A2AAnswer{How: "queued for a poll peer"}
	case ans.JSONRPC != "" || len(ans.Result) > 0:
		return A2AAnswer{How: "answered by the peer"}
	}
	return A2AAnswer{How: "accepted"}
}

// A2AMessageID is params.message.messageId of a message/send request body, "" if none.
func A2AMessageID(body map[string]json.RawMessage) string {
	var params struct {
		Message struct {
			MessageID string `json:"messageId"`
		} `json:"message"`
	}
	if body == nil || json.Unmarshal(body["params"], &params) != nil {
		return ""
	}
	return params.Message.MessageID
}

// MaxMessageIDLen bounds a peer's messageId that a reply names; a longer one is not named.
const MaxMessageIDLen = 128
