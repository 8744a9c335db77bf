// Package bridge is the platform side of the daemon: it takes messages from an inbox, hands each
// one to an Answerer (the supervisor) and routes the answer back to where the message came from.
//
// Two inboxes exist:
//
//   - Molecule (molecule.go): the Molecule platform over HTTP. It registers the workspace,
//     heartbeats, polls the activity feed, runs messages of one chat key in order and messages of
//     different chat keys in parallel, delivers each reply (canvas user → notify, peer agent → A2A
//     message/send) and only then moves its durable inbox position (bridge-state.json in the state
//     directory). A reply that cannot be delivered is retried without asking codex again, also
//     across restarts, and every attempt carries the same Idempotency-Key (replyID). The activity
//     page is read as a stream, one row at a time with a per-row cap (rowscan.go), so memory does
//     not grow with the page. Platform calls never follow a redirect: the token stays with
//     PLATFORM_URL's origin. Chats run at once as far as the supervisor's pool allows, with no
//     limit of the inbox's own; a message the pool answers busy stays unacknowledged and is tried
//     again with backoff (BusyRetryFor) before it is answered busy.
//   - LocalInbox (localinbox.go): a small HTTP API for a loopback listener, the embedded default:
//     POST /v1/chats/{chatKey}/messages answers synchronously.
//
// Durable state: <StateDir>/bridge-state.json (StateFileName), written atomically (temp file,
// fsync, rename, directory fsync). It holds the inbox position as a low-water mark over arrival
// order (the last activity id such that it and every row received before it are finished), the
// ids finished after that position plus a bounded set of recent ones (so rows sent again are not
// answered twice), and the replies codex produced that the platform has not accepted yet (stored
// before the first delivery attempt, so a crash never makes codex answer twice). Rows in flight
// are not stored: they are after the position and the platform sends them again.
//
// Every failure a user can suffer (codex failed, a watchdog retired the session, the pool is busy,
// codex is not logged in) is turned into a short reply the user can act on (replytext.go).
package bridge
