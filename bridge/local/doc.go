// Package local is the local inbox, the embedded default: a small HTTP API for a loopback
// listener. POST /v1/chats/{chatKey}/messages hands the message to a chat.Answerer (the
// supervisor) and answers with the reply once the turn ended, as JSON or, when asked, as an
// event stream of the turn's steps (sse.go). GET /v1/chats/{chatKey} and .../approval read a
// chat's state and the approval its turn waits for.
//
// Every request passes a guard first (guard.go: Host, bearer token, Origin, content type),
// which the daemon's other loopback listeners (metrics) use too; server.go bounds what a client
// can hold (timeouts, ConnLimitListener).
package local
