package appserver

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// A warm turn brings about ten notifications and one response. jsonrpc2 reads each message
// several times: it validates the line, decodes it into a probe struct to tell a request from a
// response, then decodes it again into a map of interface values and encodes the params back to
// JSON; the dispatcher then decodes the params once more. On real codex that was about a third
// of the daemon's CPU per warm turn. A plain notification is therefore taken off the stream
// before jsonrpc2 sees it: one decode into its method and raw params, handed to the same handler
// on the same goroutine, so its order among responses and requests is unchanged. Anything else
// (requests, responses, and every message whose shape is not a plain notification) still goes
// through jsonrpc2, with its errors and quirks, which the hostile-input tests pin.

// reservedKeys are the JSON-RPC member names jsonrpc2 looks at. encoding/json matches struct
// fields case-insensitively and jsonrpc2 decodes requests through a case-sensitive map: a key
// that folds to one of these but is not exactly "method" or "params" leaves the message to
// jsonrpc2, so both paths agree on every input.
var reservedKeys = []string{"id", "method", "params", "result", "error", "meta"}

// plainNotification reports whether line is a notification the fast path may take, and if so
// its method and params (a copy: line is the reader's buffer). A plain notification has a
// string method that is not empty, an object as params, and no id, result, error or meta, and
// is valid UTF-8: jsonrpc2's re-encoding replaces invalid bytes, on which the rest relies.
func plainNotification(line []byte) (method string, params json.RawMessage, ok bool) {
	if !utf8.Valid(line) || !json.Valid(line) {
		return "", nil, false
	}
	var rawMethod, rawParams []byte
	reserved := false
	plain := eachMember(line, func(key, value []byte) bool {
		switch string(key) {
		case "method":
			rawMethod = value
		case "params":
			rawParams = value
		default:
			for _, r := range reservedKeys {
				if strings.EqualFold(string(key), r) {
					reserved = true
					return false
				}
			}
		}
		return true
	})
	if reserved {
		return "", nil, false
	}
	if !plain {
		return plainNotificationDecode(line)
	}
	if len(rawMethod) == 0 || rawMethod[0] != '"' || len(rawParams) == 0 || rawParams[0] != '{' {
		return "", nil, false
	}
	method, plain = plainString(rawMethod)
	if !plain && json.Unmarshal(rawMethod, &method) != nil {
		return "", nil, false
	}
	if method == "" {
		return "", nil, false
	}
	return method, append(json.RawMessage(nil), rawParams...), true
}

// plainNotificationDecode is plainNotification by a full decode of the line's members: the
// answer for the lines eachMember does not read (an escaped key), and the one it must match.
func plainNotificationDecode(line []byte) (method string, params json.RawMessage, ok bool) {
	if !utf8.Valid(line) {
		return "", nil, false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(line, &members) != nil {
		return "", nil, false
	}
	for k := range members {
		if k == "method" || k == "params" {
			continue
		}
		for _, r := range reservedKeys {
			if strings.EqualFold(k, r) {
				return "", nil, false
			}
		}
	}
	rawMethod, params := members["method"], members["params"]
	if len(rawMethod) == 0 || rawMethod[0] != '"' || len(params) == 0 || params[0] != '{' {
		return "", nil, false
	}
	if json.Unmarshal(rawMethod, &method) != nil || method == "" {
		return "", nil, false
	}
	return method, params, true
}
