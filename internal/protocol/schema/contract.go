package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/molecule-ai/codex-warm/appserver"
	"github.com/molecule-ai/codex-warm/internal/protocol"
)

// Direction says who sends a method's params: the daemon (a client request or notification) or
// codex (a server notification or request). The result goes the other way.
type Direction int

const (
	// FromDaemon: the daemon sends the params and reads the result.
	FromDaemon Direction = iota
	// FromCodex: codex sends the params and, for a request, reads the daemon's result.
	FromCodex
)

// Use is one method the daemon uses, with the Go types of package protocol that carry it.
type Use struct {
	Method    string
	Direction Direction
	// Params and Result name the schema definitions ("" for none); Params must be what the
	// method's union variant refers to.
	Params, Result string
	// GoParams and GoResult are values of the Go types (nil for none).
	GoParams, GoResult any
	// Absent are top-level JSON fields of a Go type shared between methods that this method
	// does not carry (the file change approval has no command); omitempty keeps them off the
	// wire.
	Absent []string
}

func use(method string, d Direction, params, result string, goParams, goResult any) Use {
	return Use{Method: method, Direction: d, Params: params, Result: result, GoParams: goParams, GoResult: goResult}
}

// Enum is a set of values the daemon compares against (or sends) at Def, or at property Prop
// of each of Def's variants (a tagged union's "type"). For a union of single-key objects (the
// object kinds of CodexErrorInfo) each key counts as a value.
type Enum struct {
	Def, Prop string
	Values    []string
}

// Decoded is a Go type the daemon decodes from a field it keeps raw (an item of item/completed)
// and the schema definition of that field.
type Decoded struct {
	Def string
	Go  any
}

// Contract is what the daemon relies on in codex's app-server protocol and features.
type Contract struct {
	Uses    []Use
	Decoded []Decoded
	Enums   []Enum
	// Features are the `codex features list` names the daemon or its tests set: their
	// disappearance would leave the setting doing nothing, silently.
	Features []string
}

// DaemonContract is the daemon's contract: every method of package protocol, with the types the
// daemon decodes and encodes, and every protocol constant it compares or sends.
func DaemonContract() Contract {
	thread := protocol.ThreadResult{}
	c := Contract{
		Uses: []Use{
			use(protocol.MethodInitialize, FromDaemon, "InitializeParams", "InitializeResponse", protocol.InitializeParams{}, protocol.InitializeResult{}),
			use(protocol.MethodInitialized, FromDaemon, "", "", nil, nil),
			use(protocol.MethodThreadStart, FromDaemon, "ThreadStartParams", "ThreadStartResponse", protocol.ThreadStartParams{}, thread),
			use(protocol.MethodThreadResume, FromDaemon, "ThreadResumeParams", "ThreadResumeResponse", protocol.ThreadResumeParams{}, thread),
			use(protocol.MethodThreadRevert, FromDaemon, "ThreadRevertParams", "ThreadRevertResponse", protocol.ThreadRevertParams{}, thread),
			use(protocol.MethodThreadTurns, FromDaemon, "ThreadTurnsListParams", "ThreadTurnsListResponse", protocol.ThreadTurnsParams{}, protocol.ThreadTurnsResult{}),
			use(protocol.MethodThreadNameSet, FromDaemon, "ThreadSetNameParams", "ThreadSetNameResponse", protocol.ThreadNameSetParams{}, nil),
			use(protocol.MethodThreadUnsubscribe, FromDaemon, "ThreadUnsubscribeParams", "ThreadUnsubscribeResponse", protocol.ThreadIDParams{}, protocol.ThreadUnsubscribeResult{}),
			use(protocol.MethodThreadDelete, FromDaemon, "ThreadDeleteParams", "ThreadDeleteResponse", protocol.ThreadIDParams{}, nil),
			use(protocol.MethodThreadArchive, FromDaemon, "ThreadArchiveParams", "ThreadArchiveResponse", protocol.ThreadIDParams{}, nil),
			use(protocol.MethodThreadUnarchive, FromDaemon, "ThreadUnarchiveParams", "ThreadUnarchiveResponse", protocol.ThreadIDParams{}, nil),
			use(protocol.MethodThreadCompactStart, FromDaemon, "ThreadCompactStartParams", "ThreadCompactStartResponse", protocol.ThreadIDParams{}, nil),
			use(protocol.MethodTurnStart, FromDaemon, "TurnStartParams", "TurnStartResponse", protocol.TurnStartParams{}, protocol.TurnResult{}),
			use(protocol.MethodTurnSteer, FromDaemon, "TurnSteerParams", "TurnSteerResponse", protocol.TurnSteerParams{}, protocol.TurnSteerResult{}),
			use(protocol.MethodTurnInterrupt, FromDaemon, "TurnInterruptParams", "TurnInterruptResponse", protocol.TurnInterruptParams{}, nil),
			use(protocol.MethodAccountRead, FromDaemon, "GetAccountParams", "GetAccountResponse", protocol.AccountReadParams{}, protocol.AccountReadResult{}),
			use(protocol.MethodConfigRead, FromDaemon, "ConfigReadParams", "ConfigReadResponse", protocol.ConfigReadParams{}, protocol.ConfigReadResult{}),
			use(protocol.MethodModelList, FromDaemon, "ModelListParams", "ModelListResponse", protocol.ModelListParams{}, protocol.ModelListResult{}),
			use(protocol.MethodLoginStart, FromDaemon, "LoginAccountParams", "LoginAccountResponse", protocol.ChatGPTAuthTokens{}, nil),

			use(protocol.NotifyTurnStarted, FromCodex, "TurnStartedNotification", "", protocol.TurnNotification{}, nil),
			use(protocol.NotifyTurnCompleted, FromCodex, "TurnCompletedNotification", "", protocol.TurnNotification{}, nil),
			use(protocol.NotifyItemStarted, FromCodex, "ItemStartedNotification", "", protocol.ItemNotification{}, nil),
			use(protocol.NotifyItemCompleted, FromCodex, "ItemCompletedNotification", "", protocol.ItemNotification{}, nil),
			use(protocol.NotifyAgentMessageDelta, FromCodex, "AgentMessageDeltaNotification", "", protocol.AgentMessageDelta{}, nil),
			use(protocol.NotifyTokenUsageUpdated, FromCodex, "ThreadTokenUsageUpdatedNotification", "", protocol.TokenUsageNotification{}, nil),
			use(protocol.NotifyError, FromCodex, "ErrorNotification", "", protocol.ErrorNotification{}, nil),
			use(protocol.NotifyThreadStatus, FromCodex, "ThreadStatusChangedNotification", "", protocol.ThreadStatusNotification{}, nil),
			use(protocol.NotifyThreadClosed, FromCodex, "ThreadClosedNotification", "", protocol.ThreadIDParams{}, nil),
			use(protocol.NotifyServerRequestClear, FromCodex, "ServerRequestResolvedNotification", "", nil, nil),
			use(protocol.NotifyRateLimitsUpdated, FromCodex, "AccountRateLimitsUpdatedNotification", "", protocol.RateLimitsNotification{}, nil),

			use(protocol.RequestCommandApproval, FromCodex, "CommandExecutionRequestApprovalParams", "CommandExecutionRequestApprovalResponse", protocol.ApprovalParams{}, protocol.ApprovalResponse{}),
			use(protocol.RequestFileChangeApproval, FromCodex, "FileChangeRequestApprovalParams", "FileChangeRequestApprovalResponse", protocol.ApprovalParams{}, protocol.ApprovalResponse{}),
			use(protocol.RequestPermissionsApproval, FromCodex, "PermissionsRequestApprovalParams", "PermissionsRequestApprovalResponse", nil, protocol.PermissionsResponse{}),
			use(protocol.RequestMCPElicitation, FromCodex, "McpServerElicitationRequestParams", "McpServerElicitationRequestResponse", nil, protocol.ElicitationResponse{}),
			use(protocol.RequestToolUserInput, FromCodex, "ToolRequestUserInputParams", "ToolRequestUserInputResponse", nil, protocol.UserInputResponse{}),
			use(protocol.RequestDynamicToolCall, FromCodex, "DynamicToolCallParams", "DynamicToolCallResponse", protocol.DynamicToolCallParams{}, protocol.DynamicToolCallResponse{}),
			use(protocol.RequestChatGPTTokensRefresh, FromCodex, "ChatgptAuthTokensRefreshParams", "ChatgptAuthTokensRefreshResponse", protocol.ChatGPTTokensRefreshParams{}, protocol.ChatGPTAuthTokens{}),
		},
		Decoded: []Decoded{{"ThreadItem", protocol.Item{}}},
		Enums: []Enum{
			{Def: "TurnStatus", Values: []string{protocol.TurnInProgress, protocol.TurnCompleted, protocol.TurnInterrupted, protocol.TurnFailed}},
			{Def: "ThreadItem", Prop: "type", Values: []string{protocol.ItemUserMessage, protocol.ItemAgentMessage, protocol.ItemCommandExecution,
				protocol.ItemFileChange, protocol.ItemMCPToolCall, protocol.ItemDynamicToolCall, protocol.ItemReasoning,
				protocol.ItemContextCompaction}},
			{Def: "MessagePhase", Values: []string{protocol.PhaseCommentary, protocol.PhaseFinalAnswer}},
			{Def: "CodexErrorInfo", Values: []string{protocol.CodexErrorUnauthorized, protocol.CodexErrorOther, protocol.CodexErrorHTTPConnectionFailed,
				protocol.CodexErrorResponseStreamConnectionFailed, protocol.CodexErrorResponseStreamDisconnected,
				protocol.CodexErrorResponseTooManyFailedAttempts, protocol.CodexErrorUsageLimitExceeded, protocol.CodexErrorActiveTurnNotSteerable}},
			{Def: "CommandExecutionApprovalDecision", Values: []string{protocol.DecisionAccept, protocol.DecisionAcceptForSession, protocol.DecisionDecline, protocol.DecisionCancel}},
			{Def: "FileChangeApprovalDecision", Values: []string{protocol.DecisionAccept, protocol.DecisionAcceptForSession, protocol.DecisionDecline, protocol.DecisionCancel}},
			{Def: "ThreadStatus", Prop: "type", Values: []string{protocol.ThreadStatusActive}},
			{Def: "ThreadActiveFlag", Values: []string{protocol.FlagWaitingOnApproval, protocol.FlagWaitingOnUserInput}},
			{Def: "LoginAccountParams", Prop: "type", Values: []string{protocol.LoginTypeChatGPTAuthTokens}},
			{Def: "ChatgptAuthTokensRefreshReason", Values: []string{"unauthorized"}},
			{Def: "UserInput", Prop: "type", Values: []string{"text", "image"}},
			{Def: "SortDirection", Values: []string{protocol.SortAsc, protocol.SortDesc}},
			// /undo reads every item of the turns it takes back, and which file changes ran.
			{Def: "TurnItemsView", Values: []string{protocol.TurnItemsFull}},
			{Def: "PatchApplyStatus", Values: []string{protocol.ItemStatusCompleted}},
			// What the daemon answers on its own (appserver/policy.go) and asks for (--approval ask).
			{Def: "PermissionGrantScope", Values: []string{"turn"}},
			{Def: "McpServerElicitationAction", Values: []string{"decline"}},
			// send_file (package chatfiles) and its answers (appserver/tools.go).
			{Def: "DynamicToolSpec", Prop: "type", Values: []string{"function"}},
			{Def: "DynamicToolCallOutputContentItem", Prop: "type", Values: []string{"inputText"}},
			{Def: "AskForApproval", Values: []string{"untrusted"}},
			// Unloading a thread of a child that hosts several (appserver.UnloadThread).
			{Def: "ThreadUnsubscribeStatus", Values: []string{protocol.UnsubscribeDone, protocol.UnsubscribeNotSubscribed, protocol.UnsubscribeNotLoaded}},
		},
		// mockmodel/codexhome.go switches plugins and shell_snapshot off for the tests.
		Features: []string{"plugins", "shell_snapshot"},
	}
	absent := map[string][]string{
		protocol.MethodThreadRevert:          {"model"},
		protocol.RequestFileChangeApproval:   {"command", "availableDecisions"},
		protocol.RequestChatGPTTokensRefresh: {"type"},
	}
	for i, u := range c.Uses {
		c.Uses[i].Absent = absent[u.Method]
	}
	for _, s := range appserver.LeanSettings() {
		if f, ok := strings.CutPrefix(s.Key, "features."); ok {
			c.Features = append(c.Features, f)
		}
	}
	slices.Sort(c.Features)
	return c
}

// Violation is one way a schema breaks the contract.
type Violation struct {
	// Where is a path into the schema: "ThreadStartParams.cwd", "method turn/steer".
	Where string
	// What happened, and what the daemon does with it.
	What string
}

func (v Violation) String() string { return v.Where + ": " + v.What }

// Check holds s to c and returns every violation, sorted.
func (c Contract) Check(s *Snapshot) []Violation {
	ck := checker{defs: s.Definitions}
	for _, u := range c.Uses {
		where := "method " + u.Method
		params, ok := s.Methods[u.Method]
		switch {
		case !ok:
			ck.add(where, "gone: the daemon uses it")
			continue
		case params != u.Params:
			ck.add(where, fmt.Sprintf("params are %q, the daemon sends or reads %q", params, u.Params))
			continue
		}
		ck.absent = u.Absent
		ck.def(u.Params, u.GoParams, u.Direction == FromDaemon)
		ck.def(u.Result, u.GoResult, u.Direction == FromCodex)
		ck.absent = nil
	}
	for _, d := range c.Decoded {
		ck.def(d.Def, d.Go, false)
	}
	for _, e := range c.Enums {
		def, ok := s.Definitions[e.Def]
		if !ok {
			ck.add(e.Def, "definition gone: the daemon relies on its values "+strings.Join(e.Values, ", "))
			continue
		}
		have := enumValues(s.Definitions, def, e.Prop)
		where := e.Def
		if e.Prop != "" {
			where += "." + e.Prop
		}
		for _, v := range e.Values {
			if !slices.Contains(have, v) {
				ck.add(where, fmt.Sprintf("value %q gone: the daemon relies on it (now %s)", v, strings.Join(have, ", ")))
			}
		}
	}
	slices.SortFunc(ck.out, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return slices.CompactFunc(ck.out, func(a, b Violation) bool { return a == b })
}

type checker struct {
	defs   map[string]Node
	absent []string // Use.Absent of the use being checked, for its top level
	out    []Violation
}

func (ck *checker) add(where, what string) { ck.out = append(ck.out, Violation{where, what}) }

// def checks Go type of v against definition name; sent says the daemon writes it.
func (ck *checker) def(name string, v any, sent bool) {
	if name == "" {
		return
	}
	def, ok := ck.defs[name]
	if !ok {
		ck.add(name, "definition gone")
		return
	}
	if v != nil {
		ck.value(name, []Node{def}, reflect.TypeOf(v), sent)
	}
}

var rawMessage = reflect.TypeOf(json.RawMessage{})

// value checks Go type t against the schema nodes cands (the property's schema in each variant
// that has it).
func (ck *checker) value(where string, cands []Node, t reflect.Type, sent bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var vs []Node
	for _, c := range cands {
		vs = append(vs, variants(ck.defs, c)...)
	}
	types := jsonTypes(vs)
	if want := goJSONTypes(t); want != nil && types != nil && !slices.ContainsFunc(want, func(w string) bool { return slices.Contains(types, w) }) {
		ck.add(where, fmt.Sprintf("type is %s, the daemon has %s (%s)", strings.Join(types, "|"), strings.Join(want, "|"), t))
		return
	}
	switch {
	case t == rawMessage:
	case t.Kind() == reflect.Struct:
		ck.object(where, vs, t, sent)
	case t.Kind() == reflect.Slice:
		var items []Node
		for _, v := range vs {
			if it, ok := v["items"].(Node); ok {
				items = append(items, it)
			}
		}
		if len(items) > 0 {
			ck.value(where+"[]", items, t.Elem(), sent)
		}
	case t.Kind() == reflect.Map:
		var vals []Node
		for _, v := range vs {
			if ap, ok := v["additionalProperties"].(Node); ok {
				vals = append(vals, ap)
			}
		}
		if len(vals) > 0 {
			ck.value(where+"{}", vals, t.Elem(), sent)
		}
	}
}

// object checks struct t's JSON fields against the object variants vs: each field must be a
// property of some variant; what the daemon sends must satisfy some variant's required list.
func (ck *checker) object(where string, vs []Node, t reflect.Type, sent bool) {
	var objs []Node
	for _, v := range vs {
		if _, ok := v["properties"]; ok {
			objs = append(objs, v)
		}
	}
	if len(objs) == 0 {
		return
	}
	fields := jsonFields(t)
	if !strings.ContainsAny(where, ".[{") {
		fields = slices.DeleteFunc(fields, func(f jsonField) bool { return slices.Contains(ck.absent, f.name) })
	}
	// An object that takes any property (config/read's config, for keys it does not type) cannot
	// lose one.
	open := slices.ContainsFunc(objs, func(o Node) bool { return o["additionalProperties"] == true })
	var names []string
	for _, f := range fields {
		names = append(names, f.name)
		var props []Node
		for _, o := range objs {
			oprops, _ := o["properties"].(Node)
			switch p := oprops[f.name].(type) {
			case Node:
				props = append(props, p)
			case bool: // true: any value
				props = append(props, Node{})
			}
		}
		if len(props) == 0 && open {
			continue
		}
		if len(props) == 0 {
			ck.add(where+"."+f.name, fmt.Sprintf("field gone or renamed: the daemon %s it (%s)", map[bool]string{true: "sends", false: "reads"}[sent], f.typ))
			continue
		}
		ck.value(where+"."+f.name, props, f.typ, sent)
	}
	if !sent {
		return
	}
	var missing []string
	for _, o := range objs {
		var m []string
		for _, r := range nodesOrStrings(o["required"]) {
			if !slices.Contains(names, r) {
				m = append(m, r)
			}
		}
		if len(m) == 0 {
			return
		}
		missing = m
	}
	ck.add(where, fmt.Sprintf("requires %s, which the daemon does not send", strings.Join(missing, ", ")))
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists the fields encoding/json encodes of struct t.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name, f.Type})
	}
	return out
}

// goJSONTypes are the JSON types Go type t decodes from; nil: any.
func goJSONTypes(t reflect.Type) []string {
	if t == rawMessage {
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		return []string{"string"}
	case reflect.Bool:
		return []string{"boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return []string{"integer", "number"}
	case reflect.Float32, reflect.Float64:
		return []string{"number", "integer"}
	case reflect.Struct, reflect.Map:
		return []string{"object"}
	case reflect.Slice, reflect.Array:
		return []string{"array"}
	}
	return nil
}

// variants resolves n into the alternatives it allows: $ref followed, oneOf, anyOf and allOf
// spread, "null" alternatives dropped.
func variants(defs map[string]Node, n Node) []Node {
	seen := map[string]bool{}
	var out []Node
	var walk func(Node)
	walk = func(n Node) {
		if r := refName(n); r != "" {
			if seen[r] {
				return
			}
			seen[r] = true
			if d, ok := defs[r]; ok {
				walk(d)
			}
			return
		}
		spread := false
		for _, k := range []string{"oneOf", "anyOf", "allOf"} {
			for _, c := range nodes(n[k]) {
				spread = true
				walk(c)
			}
		}
		if spread && n["properties"] == nil && n["type"] == nil {
			return
		}
		if t, _ := n["type"].(string); t == "null" {
			return
		}
		out = append(out, n)
	}
	walk(n)
	return out
}

// jsonTypes are the JSON types the variants allow (null aside); nil: not said, any.
func jsonTypes(vs []Node) []string {
	var out []string
	for _, v := range vs {
		switch t := v["type"].(type) {
		case string:
			out = append(out, t)
		case []any:
			for _, e := range t {
				if s, _ := e.(string); s != "" && s != "null" {
					out = append(out, s)
				}
			}
		default:
			switch {
			case v["enum"] != nil:
				out = append(out, "string")
			case v["properties"] != nil:
				out = append(out, "object")
			default:
				return nil
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// enumValues collects the values def allows, or (prop set) the values of prop in its variants.
func enumValues(defs map[string]Node, def Node, prop string) []string {
	var out []string
	for _, v := range variants(defs, def) {
		props, _ := v["properties"].(Node)
		if prop != "" {
			if p, ok := props[prop].(Node); ok {
				out = append(out, enumValues(defs, p, "")...)
			}
			continue
		}
		out = append(out, nodesOrStrings(v["enum"])...)
		if c, ok := v["const"].(string); ok {
			out = append(out, c)
		}
		// A single-key object of a union (CodexErrorInfo's {"httpConnectionFailed": {...}}).
		if req := nodesOrStrings(v["required"]); len(req) == 1 && len(props) == 1 {
			out = append(out, req[0])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// nodesOrStrings returns the strings of a JSON array.
func nodesOrStrings(v any) []string {
	arr, _ := v.([]any)
	var out []string
	for _, e := range arr {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
