package protocol

// thread/status/changed: params {threadId, status:{type, activeFlags}}. While a thread waits on
// a server request, its status is active with one of the waiting flags
// (testdata/codex-wire/approval-declined.jsonl).
const (
	ThreadStatusActive     = "active"
	FlagWaitingOnApproval  = "waitingOnApproval"
	FlagWaitingOnUserInput = "waitingOnUserInput"
)

// ThreadStatusNotification is the params of thread/status/changed.
type ThreadStatusNotification struct {
	ThreadID string `json:"threadId"`
	Status   struct {
		Type        string   `json:"type"`
		ActiveFlags []string `json:"activeFlags,omitempty"`
	} `json:"status"`
}
