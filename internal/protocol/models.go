package protocol

// The model catalog and a turn's model and effort (codex 0.171.0; docs/PROTOCOL.md "Choosing a
// chat's model"):
//
//   - model/list {cursor, includeHidden, limit} answers {data: [Model], nextCursor}: codex's
//     catalog, one page at a time (nextCursor null on the last). It is the built-in catalog
//     even when the configured provider is another one.
//   - turn/start's model and effort apply to that turn and every later one of the thread, and
//     codex writes them into the rollout. codex checks neither: effort is any non-empty
//     string, and an unknown model goes to the provider unchanged.
const MethodModelList = "model/list"

// ModelListParams are the params of model/list.
type ModelListParams struct {
	Cursor        string `json:"cursor,omitempty"`
	IncludeHidden bool   `json:"includeHidden,omitempty"`
	Limit         int    `json:"limit,omitempty"`
}

// ModelListResult is one page of model/list.
type ModelListResult struct {
	Data       []Model `json:"data"`
	NextCursor *string `json:"nextCursor"`
}

// Model is one entry of codex's model catalog, the part the daemon reads.
type Model struct {
	// ID is what turn/start's model takes; Model is the provider's name of it (the same in
	// codex 0.171's catalog).
	ID          string `json:"id"`
	Model       string `json:"model"`
	DisplayName string `json:"displayName"`
	Hidden      bool   `json:"hidden"`
	IsDefault   bool   `json:"isDefault"`
	// SupportedReasoningEfforts are the levels turn/start's effort may take with this model.
	SupportedReasoningEfforts []ReasoningEffortOption `json:"supportedReasoningEfforts"`
	DefaultReasoningEffort    string                  `json:"defaultReasoningEffort"`
}

// ReasoningEffortOption is one reasoning level a model supports.
type ReasoningEffortOption struct {
	ReasoningEffort string `json:"reasoningEffort"`
	Description     string `json:"description,omitempty"`
}

// ItemStatusCompleted is the status of a tool item (a fileChange) that ran to its end.
const ItemStatusCompleted = "completed"
