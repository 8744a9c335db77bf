// Package molecule is the Molecule inbox: it takes messages from the Molecule platform over HTTP,
// hands each one to a chat.Answerer (the supervisor) and delivers the answer back to where the
// message came from.
//
// It registers the workspace, heartbeats, polls the activity feed, runs messages of one chat key
// in order and messages of different chat keys in parallel, delivers each reply (canvas user →
// notify, peer agent → A2A message/send) and only then moves its durable inbox position
// (bridge-state.json in the state directory). A reply that cannot be delivered is retried
// without asking codex again, also across restarts, and every attempt carries the same
// messageId and Idempotency-Key (platform.ReplyID); notify has no deduplication, so an attempt whose
// answer was lost is sent once more at most (outbound.go). The activity page is read as a stream,
// one row at a time with a per-row cap, so memory does not grow with the page. Platform calls never follow a
// redirect: the token stays with the platform URL's origin. Chats run at once as far as the
// supervisor's pool allows, with no limit of the inbox's own; a message that cannot be answered
// now (the pool busy for up to BusyRetryFor, the model unreachable, the usage limit, a paused
// workspace; its reply meeting the platform away) stays unacknowledged and waits (wait.go).
//
// The platform client is package platform (HTTP, the token's rotation, the rate gate, the tenant
// guard, the activity pages read as a stream); the inbox is five parts along a message's way,
// each with its own state, lock and goroutines, composed by Inbox (molecule.go: New, Run, Stats,
// and handle, which routes a job from part to part and alone delivers a reply):
//   - the feed (feed.go, stream.go): the poll loop woken by the event stream (and again soon after
//     a delegation's event, delegationpoll.go), each row judged (package inbound), admitted in the delivery ledger (package ledger) and queued
//     on the per-chat dispatcher (dispatcher.go), and the acks;
//   - the answerer (moleculeanswer.go, waiting.go, newreset.go, pingpong.go): a message's turn,
//     its one wait while it cannot be answered now (waiting.go, wait.go), its reply stored and
//     returned to handle as what to deliver (toSend), chat commands;
//   - the replies (replies.go, outbound.go, sendfiles.go, uploads.go): a reply until the platform
//     takes it, the notices of a wait, files sent and uploads taken;
//   - the turn's view (turnview.go, progress.go, chips.go, approvals.go): what a running turn
//     shows the chat: progress notes, tool chips, approval prompts;
//   - the workspace (register.go, health.go, wsstate.go, session.go): register, the heartbeat, a
//     paused or deleted workspace (ErrWorkspaceDeleted), the canvas chat's New session.
//
// What they share has its own lock: the ledger and its writer (statewrite.go), the counters
// (stats.go), the image budget, the pause gate, the peer caps, the outage and tenancy logs
// (reach.go, tenancy.go), the heartbeat's answer window (health.go). No part calls another
// while it holds its own lock, so locks never nest; owners_test.go pins who touches what.
//
// Durable state: package ledger keeps it in the state directory, <StateDir>/bridge-state.json
// (StateFileName) and bridge-done.jsonl: the inbox position as a low-water mark over arrival
// order, the replies codex produced that the platform has not accepted yet (stored before the
// first delivery attempt, so a crash never makes codex answer twice), and what the chats of
// waiting messages were told. Rows in flight are not stored: they are after the position and
// the platform sends them again.
//
// Every failure a user can suffer (codex failed, a watchdog retired the session, the pool is busy,
// codex is not logged in) is turned into a short reply the user can act on (chat.ReplyText).
package molecule
