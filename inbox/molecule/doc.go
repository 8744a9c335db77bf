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
// answer was lost is sent once more at most (outbound.go). The activity page is read as a stream, one row at a time with a
// per-row cap (rowscan.go), so memory does not grow with the page. Platform calls never follow a
// redirect: the token stays with the platform URL's origin. Chats run at once as far as the
// supervisor's pool allows, with no limit of the inbox's own; a message that cannot be answered
// now (the pool busy for up to BusyRetryFor, the model unreachable, the usage limit, a paused
// workspace; its reply meeting the platform away) stays unacknowledged and waits (wait.go).
//
// The platform limits requests (600 a minute per bucket, the whole org's when
// X-Molecule-Org-Id is sent): every call goes through one rate gate in the client, closed by a
// 429 for its Retry-After (ratelimit.go). The workspace token rotates in <configs>/.auth_token
// and is re-read when that file changes and after a 401 (token.go). A SaaS tenant's guard
// refuses calls without MOLECULE_ORG_ID; that is logged naming the variable and never drops a
// reply (tenancy.go). The activity feed answers at most a page (500 rows) per call, so a cold
// start walks its window back with before_ts and a backlog reads on page after page (paging.go).
//
// Files, one job each: platform.go (the platform client), paging.go (the activity pages),
// rowscan.go (the streamed activity page), normalize.go (a row → a message), ledger.go (the
// durable position), dispatcher.go (the per-chat queues), molecule.go (poll, heartbeat,
// delivery), moleculeanswer.go (a message's turn and its reply), wait.go and waiting.go (the one
// wait of a message that cannot be answered now, whatever the reason), approvals.go and progress.go
// (what a running turn tells the chat), uploads.go and uploadfetch.go (files the canvas user
// uploads: fetched, saved or shown, acked), health.go (the heartbeat's is_busy and
// runtime_state), session.go (the canvas's New session: one new thread, judged from the
// platform's chat-history marker; <StateDir>/canvas-session.json) and wsstate.go (a paused
// workspace answers nothing; a deleted one stops Run with ErrWorkspaceDeleted), outbound.go
// (notify, A2A sends and their retry rules), delegation.go (delegation results) and pingpong.go
// (the cap on automatic exchanges with one peer).
//
// Durable state: <StateDir>/bridge-state.json (StateFileName), written atomically (temp file,
// fsync, rename, directory fsync). It holds the inbox position as a low-water mark over arrival
// order (the last activity id such that it and every row received before it are finished), the
// ids finished after that position, and the replies codex produced that the platform has not
// accepted yet (stored before the first delivery attempt, so a crash never makes codex answer
// twice), and what the chats of waiting messages were told. A bounded set of recent ids behind the position (so rows sent again are not answered
// twice) is appended to <StateDir>/bridge-done.jsonl (DoneLogFileName) before the state file
// moves past them, so a message costs a small write however many went before (donelog.go). Rows in flight
// are not stored: they are after the position and the platform sends them again.
//
// Every failure a user can suffer (codex failed, a watchdog retired the session, the pool is busy,
// codex is not logged in) is turned into a short reply the user can act on (chat.ReplyText).
package molecule
