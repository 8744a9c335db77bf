// Package molecule is the Molecule inbox: it takes messages from the Molecule platform over HTTP,
// hands each one to a chat.Answerer (the supervisor) and delivers the answer back to where the
// message came from.
//
// It registers the workspace, heartbeats, polls the activity feed, runs messages of one chat key
// in order and messages of different chat keys in parallel, delivers each reply (canvas user →
// notify, peer agent → A2A message/send) and only then moves its durable inbox position
// (bridge-state.json in the state directory). A reply that cannot be delivered is retried
// without asking codex again, also across restarts, and every attempt carries the same
// messageId and Idempotency-Key (replyID); notify has no deduplication, so an attempt whose
// answer was lost is sent once more at most (outbound.go). The activity page is read as a stream, one row at a time with a
// per-row cap (rowscan.go), so memory does not grow with the page. Platform calls never follow a
// redirect: the token stays with PLATFORM_URL's origin. Chats run at once as far as the
// supervisor's pool allows, with no limit of the inbox's own; a message the pool answers busy
// stays unacknowledged and is tried again with backoff (BusyRetryFor) before it is answered busy.
//
// Files, one job each: platform.go (the platform client), rowscan.go (the streamed activity
// page), normalize.go (a row → a message), ledger.go (the durable position), dispatcher.go (the
// per-chat queues), molecule.go (poll, heartbeat, delivery), moleculeanswer.go (a message's turn
// and its reply), approvals.go and progress.go (what a running turn tells the chat),
// outbound.go (notify, A2A sends and their retry rules), delegation.go (delegation results),
// pingpong.go (the cap on automatic exchanges with one peer).
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
// codex is not logged in) is turned into a short reply the user can act on (chat.ReplyText).
package molecule
