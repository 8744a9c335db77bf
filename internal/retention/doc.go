// Package retention archives the codex threads of chats that have been idle for long, deletes
// archived threads for good after a while, and brings an archived chat back when it writes
// again, keeping every step in the state directory's threads-archive.jsonl.
//
// A thread leaves in four recorded steps: an archive-intent line (appended and fsynced), codex's
// thread/archive (the rollout moves from CODEX_HOME/sessions to CODEX_HOME/archived_sessions),
// the chat key dropped from sessions.json, an archived line. A kill between any two of them loses
// nothing: Open finds the intent without its archived line, drops the key from sessions.json if
// it is still there, and records it archived. The rollout is then in one of the two folders, and
// a returning chat first unarchives (which fails harmlessly when the rollout never moved) and
// then resumes, so its conversation continues either way. Deleting is two steps (delete-intent,
// codex's thread/delete, deleted); an intent without its result is retried by the next sweep.
//
// The file is shared with sessions.Store.Archive, which appends the threads chats leave (/new, a
// thread codex could not resume) as lines without an event. Those threads fall under the same
// retention (left.go): Open reads them back, the daemon reports new ones with Left, and a sweep
// archives each one IdleAfter after it was left and deletes it DeleteAfter later. They are kept
// by thread id apart from the chats' entries, so a returning chat never brings one back and its
// live thread is never one of them.
package retention
