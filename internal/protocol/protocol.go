// Package protocol holds the codex app-server wire types this project uses.
//
// The shapes follow codex 0.169.0 (see testdata/codex-wire for recorded sessions). Only the
// fields the daemon reads are declared; encoding/json ignores the rest, so newer servers that add
// fields keep working. Fields whose shape varies across versions stay json.RawMessage.
package protocol

import "encoding/json"

// Method names of client requests and notifications.
const (
	MethodInitialize    = "initialize"
	MethodInitialized   = "initialized"
	MethodThreadStart   = "thread/start"
	MethodThreadResume  = "thread/resume"
	MethodTurnStart     = "turn/start"
	MethodTurnInterrupt = "turn/interrupt"
	MethodThreadTurns   = "thread/turns/list"
	MethodThreadRevert  = "thread/revert"
	MethodAccountRead   = "account/read"
	MethodConfigRead    = "config/read"
	MethodLoginStart    = "account/login/start"
	// MethodThreadNameSet names a thread; its first write puts a new thread on disk.
	MethodThreadNameSet = "thread/name/set"
	// MethodThreadUnsubscribe unloads a thread from the process once no client follows it.
	MethodThreadUnsubscribe = "thread/unsubscribe"
	// MethodThreadDelete removes a thread's rollout and its name entry from CODEX_HOME.
	MethodThreadDelete = "thread/delete"
	// MethodThreadArchive moves a thread's rollout out of CODEX_HOME/sessions into
	// CODEX_HOME/archived_sessions; MethodThreadUnarchive moves it back (codex 0.171.0:
	// params {"threadId"}; results {} and {"thread"}).
	MethodThreadArchive   = "thread/archive"
	MethodThreadUnarchive = "thread/unarchive"
)

// Method names of server notifications the daemon interprets.
const (
	NotifyTurnStarted        = "turn/started"
	NotifyTurnCompleted      = "turn/completed"
	NotifyItemStarted        = "item/started"
	NotifyItemCompleted      = "item/completed"
	NotifyAgentMessageDelta  = "item/agentMessage/delta"
	NotifyTokenUsageUpdated  = "thread/tokenUsage/updated"
	NotifyError              = "error"
	NotifyThreadStatus       = "thread/status/changed"
	NotifyServerRequestClear = "serverRequest/resolved"
	// NotifyThreadClosed says a thread was unloaded from the process (after thread/unsubscribe
	// and the unload delay): another process may take its writer now.
	NotifyThreadClosed = "thread/closed"
)

// Method names of server-initiated requests.
const (
	RequestCommandApproval     = "item/commandExecution/requestApproval"
	RequestFileChangeApproval  = "item/fileChange/requestApproval"
	RequestPermissionsApproval = "item/permissions/requestApproval"
	RequestMCPElicitation      = "mcpServer/elicitation/request"
	RequestToolUserInput       = "item/tool/requestUserInput"
	// RequestChatGPTTokensRefresh asks the client for new ChatGPT tokens after the model
	// rejected the ones it gave (a 401). codex waits 10 s for the answer, then fails the turn.
	RequestChatGPTTokensRefresh = "account/chatgptAuthTokens/refresh"
	// RequestDynamicToolCall calls a client-defined tool (ThreadStartParams.DynamicTools) of
	// the thread; the client answers with a DynamicToolCallResponse. Experimental API.
	RequestDynamicToolCall = "item/tool/call"
)

// Turn statuses as reported in turn.status.
const (
	TurnInProgress  = "inProgress"
	TurnCompleted   = "completed"
	TurnInterrupted = "interrupted"
	TurnFailed      = "failed"
)

// Item types the projector understands. Others are carried through untouched.
const (
	ItemUserMessage      = "userMessage"
	ItemAgentMessage     = "agentMessage"
	ItemCommandExecution = "commandExecution"
	ItemFileChange       = "fileChange"
	ItemMCPToolCall      = "mcpToolCall"
	ItemDynamicToolCall  = "dynamicToolCall"
	ItemReasoning        = "reasoning"
)

// Agent message phases.
const (
	PhaseCommentary  = "commentary"
	PhaseFinalAnswer = "final_answer"
)

// ClientInfo identifies this client in the initialize request.
type ClientInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// InitializeCapabilities is the optional capabilities block of initialize.
type InitializeCapabilities struct {
	// ExperimentalAPI opts in to the experimental part of app-server v2; client-owned ChatGPT
	// tokens (account/login/start with type chatgptAuthTokens) need it.
	ExperimentalAPI           bool     `json:"experimentalApi,omitempty"`
	OptOutNotificationMethods []string `json:"optOutNotificationMethods,omitempty"`
}

// InitializeParams are the params of initialize.
type InitializeParams struct {
	ClientInfo   ClientInfo              `json:"clientInfo"`
	Capabilities *InitializeCapabilities `json:"capabilities,omitempty"`
}

// InitializeResult is the result of initialize.
type InitializeResult struct {
	UserAgent      string `json:"userAgent"`
	CodexHome      string `json:"codexHome"`
	PlatformFamily string `json:"platformFamily"`
	PlatformOs     string `json:"platformOs"`
}

// AccountReadParams are the params of account/read.
type AccountReadParams struct {
	// RefreshToken asks for a token refresh before answering; the daemon never sets it.
	RefreshToken bool `json:"refreshToken,omitempty"`
}

// AccountReadResult is the result of account/read: the credentials codex would use, and whether
// its model provider needs an OpenAI login at all (a provider configured in config.toml with a
// key of its own, or a local one, does not).
type AccountReadResult struct {
	// Account is nil when codex has no credentials.
	Account            *Account `json:"account"`
	RequiresOpenaiAuth bool     `json:"requiresOpenaiAuth"`
}

// Account is the credential kind in AccountReadResult: "apiKey", "chatgpt", "amazonBedrock", ...
type Account struct {
	Type string `json:"type"`
}

// ConfigReadParams are the params of config/read.
type ConfigReadParams struct {
	// Cwd resolves project config layers as seen from that directory; empty: none.
	Cwd string `json:"cwd,omitempty"`
}

// ConfigReadResult is the part of config/read's result the daemon reads: the effective config,
// every layer (CODEX_HOME/config.toml, -c overrides, project files) merged.
type ConfigReadResult struct {
	Config EffectiveConfig `json:"config"`
	// Origins has an entry for each dotted key set explicitly by some layer (config.toml, -c,
	// a project file), saying which; a key left at codex's default has none.
	Origins map[string]json.RawMessage `json:"origins"`
}

// EffectiveConfig holds the effective config values the daemon reports; null when unset.
type EffectiveConfig struct {
	Model         *string `json:"model"`
	ModelProvider *string `json:"model_provider"`
	// ModelReasoningEffort is the configured effort (model_reasoning_effort).
	ModelReasoningEffort *string `json:"model_reasoning_effort"`
	// ModelProviders are the providers config.toml defines (the built-in ones are not listed).
	ModelProviders map[string]ModelProviderConfig `json:"model_providers"`
}

// ModelProviderConfig is the part of a configured model provider the daemon reads.
type ModelProviderConfig struct {
	BaseURL            *string `json:"base_url"`
	RequiresOpenAIAuth bool    `json:"requires_openai_auth"`
}

// ThreadStartParams are the params of thread/start. Every field is optional.
type ThreadStartParams struct {
	Cwd                   string          `json:"cwd,omitempty"`
	ApprovalPolicy        string          `json:"approvalPolicy,omitempty"`
	Sandbox               string          `json:"sandbox,omitempty"`
	Model                 string          `json:"model,omitempty"`
	ModelProvider         string          `json:"modelProvider,omitempty"`
	BaseInstructions      string          `json:"baseInstructions,omitempty"`
	DeveloperInstructions string          `json:"developerInstructions,omitempty"`
	Config                json.RawMessage `json:"config,omitempty"`
	Ephemeral             bool            `json:"ephemeral,omitempty"`
	// DynamicTools are tools the client defines and answers itself (item/tool/call). They need
	// the experimental API (InitializeCapabilities.ExperimentalAPI).
	DynamicTools []DynamicToolSpec `json:"dynamicTools,omitempty"`
}

// DynamicToolSpec is one client-defined function tool of thread/start.
type DynamicToolSpec struct {
	Type        string          `json:"type"` // "function"
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// DynamicToolCallParams are the params of item/tool/call.
type DynamicToolCallParams struct {
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// DynamicToolCallResponse answers item/tool/call: what the model is told, and whether the call
// succeeded.
type DynamicToolCallResponse struct {
	ContentItems []DynamicToolContent `json:"contentItems"`
	Success      bool                 `json:"success"`
}

// DynamicToolContent is one content item of a DynamicToolCallResponse; Type "inputText".
type DynamicToolContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ThreadNameSetParams are the params of thread/name/set. codex refuses an empty name.
type ThreadNameSetParams struct {
	ThreadID string `json:"threadId"`
	Name     string `json:"name"`
}

// ThreadIDParams are the params of the requests that name only a thread: thread/unsubscribe and
// thread/delete.
type ThreadIDParams struct {
	ThreadID string `json:"threadId"`
}

// ThreadUnsubscribeResult is the result of thread/unsubscribe.
type ThreadUnsubscribeResult struct {
	// Status is UnsubscribeDone, UnsubscribeNotSubscribed or UnsubscribeNotLoaded.
	Status string `json:"status"`
}

// thread/unsubscribe's statuses (ThreadUnsubscribeStatus).
const (
	// UnsubscribeDone: the thread unloads once idle for thread_unload_delay_secs, then
	// thread/closed.
	UnsubscribeDone          = "unsubscribed"
	UnsubscribeNotSubscribed = "notSubscribed"
	// UnsubscribeNotLoaded: the process does not hold the thread (any more).
	UnsubscribeNotLoaded = "notLoaded"
)

// ThreadResumeParams are the params of thread/resume. The optional overrides mirror thread/start.
// ExcludeTurns leaves thread.turns out of the result: codex then skips the full-history
// hydration it deprecates (it sends a deprecationNotice otherwise). The model still gets the whole
// history on the next turn.
type ThreadResumeParams struct {
	ThreadID              string `json:"threadId"`
	ExcludeTurns          bool   `json:"excludeTurns,omitempty"`
	Cwd                   string `json:"cwd,omitempty"`
	ApprovalPolicy        string `json:"approvalPolicy,omitempty"`
	Sandbox               string `json:"sandbox,omitempty"`
	Model                 string `json:"model,omitempty"`
	BaseInstructions      string `json:"baseInstructions,omitempty"`
	DeveloperInstructions string `json:"developerInstructions,omitempty"`
}

// Thread is the subset of a thread object the daemon reads.
type Thread struct {
	ID     string `json:"id"`
	Path   string `json:"path,omitempty"`
	Cwd    string `json:"cwd,omitempty"`
	Status struct {
		Type string `json:"type"`
	} `json:"status"`
}

// ThreadResult is the result of thread/start, thread/resume and thread/revert.
type ThreadResult struct {
	Thread Thread `json:"thread"`
	Model  string `json:"model,omitempty"`
}

// Sort directions of paginated lists.
const (
	SortAsc  = "asc"
	SortDesc = "desc"
)

// ThreadTurnsParams are the params of thread/turns/list: a page of the thread's persisted turns,
// newest first unless SortDirection says otherwise. Each turn's items default to the "summary"
// view, which keeps the user and agent messages and leaves tool items out.
type ThreadTurnsParams struct {
	ThreadID      string `json:"threadId"`
	Cursor        string `json:"cursor,omitempty"`
	Limit         int    `json:"limit,omitempty"`
	SortDirection string `json:"sortDirection,omitempty"`
	// ItemsView is TurnItemsFull for every item, tool items (fileChange) included.
	ItemsView string `json:"itemsView,omitempty"`
}

// TurnItemsFull is the items view of thread/turns/list that keeps every item of a turn.
const TurnItemsFull = "full"

// ThreadTurnsResult is the result of thread/turns/list.
type ThreadTurnsResult struct {
	Data       []Turn  `json:"data"`
	NextCursor *string `json:"nextCursor,omitempty"`
}

// ThreadRevertParams are the params of thread/revert: the thread's persisted history is replaced
// by the part before BeforeTurnID (that turn and every later one are dropped). Files the dropped
// turns changed stay changed.
type ThreadRevertParams struct {
	ThreadID     string `json:"threadId"`
	BeforeTurnID string `json:"beforeTurnId"`
}

// UserInput is one element of turn/start input: Type "text" with Text, or Type "image" with URL
// (codex 0.169 takes an http(s) or data: URL; the daemon sends data URLs).
type UserInput struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	URL  string `json:"url,omitempty"`
}

// TurnStartParams are the params of turn/start.
type TurnStartParams struct {
	ThreadID string      `json:"threadId"`
	Input    []UserInput `json:"input"`
	// Model and Effort apply to this turn and every later one of the thread (models.go);
	// empty leaves them as the thread has them.
	Model  string `json:"model,omitempty"`
	Effort string `json:"effort,omitempty"`
}

// TurnInterruptParams are the params of turn/interrupt.
type TurnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// TurnError is turn.error on a failed or interrupted turn, and error.error in an error
// notification. CodexErrorInfo is a string ("internalServerError") or an object depending on the
// error kind, so it stays raw.
type TurnError struct {
	Message           string          `json:"message"`
	CodexErrorInfo    json.RawMessage `json:"codexErrorInfo,omitempty"`
	AdditionalDetails *string         `json:"additionalDetails,omitempty"`
}

// Kinds of TurnError.CodexErrorInfo that the daemon acts on (the schema lists more). Most kinds
// are bare strings; the HTTP kinds are objects {"<kind>": {"httpStatusCode": n}} with the upstream
// status, null when there was none.
const (
	// CodexErrorUnauthorized: the provider rejected the credentials, or codex could not
	// refresh its login.
	CodexErrorUnauthorized = "unauthorized"
	// CodexErrorOther: codex has no kind for the cause. A provider's unexpected HTTP status
	// ("unexpected status 401 Unauthorized: ...") is reported this way, without the status.
	CodexErrorOther                          = "other"
	CodexErrorHTTPConnectionFailed           = "httpConnectionFailed"
	CodexErrorResponseStreamConnectionFailed = "responseStreamConnectionFailed"
	CodexErrorResponseStreamDisconnected     = "responseStreamDisconnected"
	CodexErrorResponseTooManyFailedAttempts  = "responseTooManyFailedAttempts"
)

// Kind decodes CodexErrorInfo: its kind, and for the HTTP kinds the upstream status (0 when
// codex had none). Both are zero when codexErrorInfo is absent, null or of an unknown shape.
func (e *TurnError) Kind() (kind string, httpStatus int) {
	if e == nil || len(e.CodexErrorInfo) == 0 {
		return "", 0
	}
	if json.Unmarshal(e.CodexErrorInfo, &kind) == nil {
		return kind, 0
	}
	var obj map[string]struct {
		HTTPStatusCode *int `json:"httpStatusCode"`
	}
	if json.Unmarshal(e.CodexErrorInfo, &obj) != nil || len(obj) != 1 {
		return "", 0
	}
	for k, v := range obj {
		kind = k
		if v.HTTPStatusCode != nil {
			httpStatus = *v.HTTPStatusCode
		}
	}
	return kind, httpStatus
}

// Turn is the turn object of turn/start results and turn notifications.
type Turn struct {
	ID         string            `json:"id"`
	Status     string            `json:"status"`
	Error      *TurnError        `json:"error,omitempty"`
	Items      []json.RawMessage `json:"items,omitempty"`
	DurationMs *int64            `json:"durationMs,omitempty"`
}

// TurnResult is the result of turn/start.
type TurnResult struct {
	Turn Turn `json:"turn"`
}

// TurnNotification is the params of turn/started and turn/completed.
type TurnNotification struct {
	ThreadID string `json:"threadId"`
	Turn     Turn   `json:"turn"`
}

// ItemNotification is the params of item/started and item/completed. Item stays raw so unknown
// item types survive; decode it with DecodeItem.
type ItemNotification struct {
	ThreadID string          `json:"threadId"`
	TurnID   string          `json:"turnId"`
	Item     json.RawMessage `json:"item"`
}

// AgentMessageDelta is the params of item/agentMessage/delta.
type AgentMessageDelta struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

// ErrorNotification is the params of the error notification. WillRetry true does not end the
// turn.
type ErrorNotification struct {
	Error     TurnError `json:"error"`
	WillRetry bool      `json:"willRetry"`
	ThreadID  string    `json:"threadId"`
	TurnID    string    `json:"turnId"`
}

// TokenUsageBreakdown counts tokens.
type TokenUsageBreakdown struct {
	TotalTokens           int64 `json:"totalTokens"`
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

// ThreadTokenUsage is the tokenUsage of thread/tokenUsage/updated: the thread's running total and
// the last model call.
type ThreadTokenUsage struct {
	Total              TokenUsageBreakdown `json:"total"`
	Last               TokenUsageBreakdown `json:"last"`
	ModelContextWindow *int64              `json:"modelContextWindow,omitempty"`
}

// TokenUsageNotification is the params of thread/tokenUsage/updated.
type TokenUsageNotification struct {
	ThreadID   string           `json:"threadId"`
	TurnID     string           `json:"turnId"`
	TokenUsage ThreadTokenUsage `json:"tokenUsage"`
}

// Item is the decoded union of thread items. Type selects which fields are meaningful; unknown
// types keep only Type and ID.
type Item struct {
	Type string `json:"type"`
	ID   string `json:"id"`

	// userMessage
	Content []UserInput `json:"content,omitempty"`

	// agentMessage, plan
	Text  string  `json:"text,omitempty"`
	Phase *string `json:"phase,omitempty"`

	// commandExecution
	Command          string  `json:"command,omitempty"`
	Cwd              string  `json:"cwd,omitempty"`
	AggregatedOutput *string `json:"aggregatedOutput,omitempty"`
	ExitCode         *int    `json:"exitCode,omitempty"`

	// commandExecution, fileChange, mcpToolCall, dynamicToolCall
	Status string `json:"status,omitempty"`

	// fileChange
	Changes []FileUpdateChange `json:"changes,omitempty"`

	// mcpToolCall (Server, Tool), dynamicToolCall (Namespace, Tool)
	Server       string            `json:"server,omitempty"`
	Namespace    *string           `json:"namespace,omitempty"`
	Tool         string            `json:"tool,omitempty"`
	Arguments    json.RawMessage   `json:"arguments,omitempty"`
	Result       json.RawMessage   `json:"result,omitempty"`
	Error        json.RawMessage   `json:"error,omitempty"`
	ContentItems []json.RawMessage `json:"contentItems,omitempty"`
	Success      *bool             `json:"success,omitempty"`

	DurationMs *int64 `json:"durationMs,omitempty"`
}

// FileUpdateChange is one file of a fileChange item.
type FileUpdateChange struct {
	Path string          `json:"path"`
	Kind json.RawMessage `json:"kind,omitempty"`
	Diff string          `json:"diff,omitempty"`
}

// DecodeItem decodes a raw thread item.
func DecodeItem(raw json.RawMessage) (Item, error) {
	var it Item
	err := json.Unmarshal(raw, &it)
	return it, err
}

// Notification is one server notification, in arrival order. Params stay raw: the projector and
// callers decode what they need.
type Notification struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// ApprovalParams is the subset of approval request params the daemon reads (both command and
// file change approvals).
type ApprovalParams struct {
	ThreadID           string            `json:"threadId"`
	TurnID             string            `json:"turnId"`
	ItemID             string            `json:"itemId"`
	Command            string            `json:"command,omitempty"`
	Reason             *string           `json:"reason,omitempty"`
	AvailableDecisions []json.RawMessage `json:"availableDecisions,omitempty"`
}

// ApprovalResponse answers command and file change approvals.
type ApprovalResponse struct {
	Decision string `json:"decision"`
}

// Approval decisions.
const (
	DecisionAccept           = "accept"
	DecisionAcceptForSession = "acceptForSession"
	DecisionDecline          = "decline"
	DecisionCancel           = "cancel"
)

// PermissionsResponse answers item/permissions/requestApproval. An empty Permissions grants
// nothing.
type PermissionsResponse struct {
	Permissions map[string]any `json:"permissions"`
	Scope       string         `json:"scope"`
}

// ElicitationResponse answers mcpServer/elicitation/request. Content and Meta are sent as null
// when empty: the schema lists them as required, nullable fields.
type ElicitationResponse struct {
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content"`
	Meta    json.RawMessage `json:"_meta"`
}

// UserInputResponse answers item/tool/requestUserInput.
type UserInputResponse struct {
	Answers map[string]any `json:"answers"`
}

// JSON-RPC error codes the server uses.
const (
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInternalError  = -32603
	CodeOverloaded     = -32001
)

// MethodTurnSteer adds input to the thread's running turn (codex 0.169). Unlike a second
// turn/start, which codex also merges into a running turn, it names the turn it expects.
const MethodTurnSteer = "turn/steer"

// TurnSteerParams are the params of turn/steer. ExpectedTurnID must be the thread's active turn:
// codex refuses the request (-32600) when no turn runs or another one does.
type TurnSteerParams struct {
	ThreadID       string      `json:"threadId"`
	Input          []UserInput `json:"input"`
	ExpectedTurnID string      `json:"expectedTurnId"`
}

// TurnSteerResult is the result of turn/steer: the turn that took the input.
type TurnSteerResult struct {
	TurnID string `json:"turnId"`
}

// CodexErrorActiveTurnNotSteerable is the codexErrorInfo kind ({"activeTurnNotSteerable":
// {"turnKind": "review"|"compact"}}) of a turn/steer refused because the running turn takes no
// input.
const CodexErrorActiveTurnNotSteerable = "activeTurnNotSteerable"

// LoginTypeChatGPTAuthTokens is the account/login/start type of tokens owned by the client: the
// child neither reads auth.json nor refreshes them itself, and asks the client on a 401
// (RequestChatGPTTokensRefresh). Sent again to a running child, it swaps the token in place.
const LoginTypeChatGPTAuthTokens = "chatgptAuthTokens"

// ChatGPTAuthTokens is a ChatGPT access token with the account it belongs to: the params of
// account/login/start (with Type LoginTypeChatGPTAuthTokens) and, without Type, the result of
// RequestChatGPTTokensRefresh. The access token is a JWT; codex reads its claims but does not
// check its signature.
type ChatGPTAuthTokens struct {
	Type             string  `json:"type,omitempty"`
	AccessToken      string  `json:"accessToken"`
	ChatGPTAccountID string  `json:"chatgptAccountId"`
	ChatGPTPlanType  *string `json:"chatgptPlanType"`
}

// ChatGPTTokensRefreshParams are the params of RequestChatGPTTokensRefresh.
type ChatGPTTokensRefreshParams struct {
	// Reason is "unauthorized" (the only value in codex 0.169).
	Reason string `json:"reason"`
	// PreviousAccountID is the account the child was using, when it had one.
	PreviousAccountID *string `json:"previousAccountId,omitempty"`
}
