// Package inbound reads what the Molecule platform's activity feed holds for the inbox: one row
// (docs/PROTOCOL.md section 2) becomes a message (its kind, chat key and route, its text capped
// with a note naming its attachments, the inline images codex is shown within their caps, the
// pending uploads it names), a delegation's result, or an echo or poison with the reason. It is
// pure: it reads the row and the workspace's id and limits, never panics on any input, and knows
// nothing of the inbox that queues the message (package molecule) nor of what answers it.
package inbound
