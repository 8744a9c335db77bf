package protocol

// Compaction of a thread's history (codex 0.171.0, verified; docs/PROTOCOL.md "Compacting a
// thread"): thread/compact/start {threadId} answers {} at once and runs the compaction as a turn
// of the thread: turn/started, item/started and item/completed of a contextCompaction item,
// thread/compacted (deprecated), turn/completed.
const (
	MethodThreadCompactStart = "thread/compact/start"
	ItemContextCompaction    = "contextCompaction"
)
