// Package schema is the wire contract between the daemon and codex app-server, checked against
// the codex binary under test so that a codex release that changes what the daemon relies on
// fails a test instead of a chat.
//
// Contract lists what the daemon uses: each method with the Go type of package protocol that
// carries its params and its result, and the enum values the daemon compares against or sends.
// Check holds a schema to it: a field the daemon reads or sends that is gone, renamed or of
// another JSON type, an enum value it relies on that is gone, a method whose params changed
// type, or a field the schema now requires in what the daemon sends, is a Violation. Diff lists
// every other change between two schemas (fields and values added, descriptions aside), for a
// person to read.
//
// The snapshot, app-server.schema.json, is the schema of the pinned codex trimmed to the
// closure of the contract's types; features.txt beside it is that codex's `codex features
// list`. `make codex-snapshot` (go generate) writes both from $CODEX_BIN; the tests regenerate
// them from the binary under test and compare (docs/PROTOCOL.md, "Wire contract").
package schema

//go:generate go run ./gen -out .
