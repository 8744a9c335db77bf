// Package chatfiles decides which files an agent may send back to its chat, and copies them out.
//
// The agent names a file with the send_file tool (Tool), a client-defined tool of codex's
// app-server: codex asks the daemon over the child's own JSON-RPC, tied to the thread and turn,
// so no other process can send through it. Copy then lets only what may leave, leave:
//
//   - the file is opened beneath the chat's own folder with openat2(RESOLVE_BENEATH |
//     RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), so no "..", absolute path, or symbolic link
//     (on the way or at the end) leads out of it;
//   - everything else is checked on the opened descriptor, never on the path: a regular file, one
//     hard link, within the size limit; a rename or a new link after the open changes nothing;
//   - the content is read once, from that descriptor, into the caller's writer, and refused when it
//     holds any secret the daemon knows (Secrets): a model told to copy auth.json into the chat's
//     folder sends nothing.
//
// A refusal is a *Refusal with a reason a person can read; the chat is told it.
package chatfiles
