// Package ledger is the Molecule inbox's delivery ledger: which received rows are finished, the
// replies codex produced that the platform has not accepted yet, what the chats of waiting
// messages were told, and the durable inbox position that follows from them. It lives apart from
// the inbox so that what must survive a crash (and the file format that carries it) has one small
// owner the rest of the inbox reaches only through methods.
//
// Durable state: <Dir>/bridge-state.json (StateFileName), written atomically (temp file, fsync,
// rename, directory fsync). It holds the inbox position as a low-water mark over arrival order
// (the last activity id such that it and every row received before it are finished), the ids
// finished after that position, the replies not yet accepted (stored before the first delivery
// attempt, so a crash never makes codex answer twice), and what the chats of waiting messages
// were told. A bounded set of recent ids behind the position (so rows sent again are not answered
// twice) is appended to <Dir>/bridge-done.jsonl (DoneLogFileName) before the state file moves
// past them, so a message costs a small write however many went before (donelog.go). Rows in
// flight are not stored: they are after the position and the platform sends them again.
package ledger
