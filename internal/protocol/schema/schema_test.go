package schema

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func loadSnapshot(t *testing.T) *Snapshot {
	t.Helper()
	s, err := Load(SnapshotFile)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clone deep-copies a snapshot, for a test to break.
func clone(t *testing.T, s *Snapshot) *Snapshot {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var c Snapshot
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// The committed snapshot is the pinned codex's (the Makefile's CODEX_VERSION: bump both
// together, `make codex-snapshot`), keeps the daemon's contract, and is exactly the closure of
// the contract's types.
func TestSnapshotIsThePinsAndKeepsTheContract(t *testing.T) {
	t.Parallel()
	s := loadSnapshot(t)
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CODEX_VERSION\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	if m == nil || string(m[1]) != s.CodexVersion {
		t.Errorf("snapshot from codex %s, Makefile pins %q: run `make codex-snapshot` after a bump", s.CodexVersion, m)
	}
	c := DaemonContract()
	for _, v := range c.Check(s) {
		t.Errorf("snapshot breaks the contract: %s", v)
	}
	if d := Diff(s, s.Trim(c)); len(d) > 0 || len(s.Trim(c).Definitions) != len(s.Definitions) {
		t.Errorf("snapshot is not the contract's closure (%d definitions, closure %d): %v", len(s.Definitions), len(s.Trim(c).Definitions), d)
	}
}

// Each way a release can break the daemon fails Check, naming where; an added optional field
// does not, and Diff reports it.
func TestCheckFailsOnWhatTheDaemonRelies(t *testing.T) {
	t.Parallel()
	base := loadSnapshot(t)
	c := DaemonContract()
	props := func(s *Snapshot, def string) Node { return s.Definitions[def]["properties"].(Node) }
	variant := func(s *Snapshot, def, title string) Node {
		for _, v := range nodes(s.Definitions[def]["oneOf"]) {
			if v["title"] == title {
				return v
			}
		}
		t.Fatalf("%s has no variant %s", def, title)
		return nil
	}
	for _, tc := range []struct {
		name   string
		mutate func(s *Snapshot)
		want   string // a substring of a violation; "" for none
		diff   string // a substring of a Diff line
	}{
		{"a field the daemon sends is renamed", func(s *Snapshot) {
			p := props(s, "ThreadStartParams")
			p["workingDirectory"] = p["cwd"]
			delete(p, "cwd")
		}, "ThreadStartParams.cwd: field gone or renamed: the daemon sends it", "ThreadStartParams.cwd: property gone"},
		{"a field the daemon reads is retyped", func(s *Snapshot) {
			props(s, "Turn")["id"] = Node{"type": "integer"}
		}, "TurnStartResponse.turn.id: type is integer, the daemon has string", `Turn.id.type: "string" -> "integer"`},
		{"a nested field of a union variant is gone", func(s *Snapshot) {
			delete(variant(s, "ThreadItem", "AgentMessageThreadItem")["properties"].(Node), "phase")
		}, "ThreadItem.phase: field gone or renamed: the daemon reads it", "ThreadItem.oneOf[AgentMessageThreadItem].phase: property gone"},
		{"an enum value the daemon compares is gone", func(s *Snapshot) {
			s.Definitions["TurnStatus"]["enum"] = []any{"completed", "failed", "inProgress"}
		}, `TurnStatus: value "interrupted" gone`, `TurnStatus.enum: "interrupted" gone`},
		{"an error kind the daemon acts on is gone", func(s *Snapshot) {
			d := s.Definitions["CodexErrorInfo"]
			d["anyOf"] = slices.DeleteFunc(d["anyOf"].([]any), func(v any) bool {
				return v.(Node)["title"] == "HttpConnectionFailedCodexErrorInfo"
			})
		}, `CodexErrorInfo: value "httpConnectionFailed" gone`, "variant gone"},
		{"a request the daemon sends gains a required field", func(s *Snapshot) {
			d := s.Definitions["TurnStartParams"]
			props(s, "TurnStartParams")["environmentId"] = Node{"type": "string"}
			d["required"] = append(d["required"].([]any), "environmentId")
		}, "TurnStartParams: requires environmentId", "property added (REQUIRED)"},
		{"a method's params are renamed", func(s *Snapshot) {
			s.Methods["turn/steer"] = "TurnSteerParamsV2"
		}, `method turn/steer: params are "TurnSteerParamsV2"`, "method turn/steer: params TurnSteerParams -> TurnSteerParamsV2"},
		{"a method is gone", func(s *Snapshot) { delete(s.Methods, "thread/turns/list") }, "method thread/turns/list: gone", "method thread/turns/list: gone"},
		{"an optional field is added where the daemon reads", func(s *Snapshot) {
			variant(s, "ThreadItem", "McpToolCallThreadItem")["properties"].(Node)["futureField"] = Node{"type": []any{"string", "null"}}
		}, "", "ThreadItem.oneOf[McpToolCallThreadItem].futureField: property added (optional)"},
		{"a required field is added where the daemon only reads", func(s *Snapshot) {
			d := s.Definitions["TurnStartedNotification"]
			props(s, "TurnStartedNotification")["startedAtMs"] = Node{"type": "integer"}
			d["required"] = append(d["required"].([]any), "startedAtMs")
		}, "", "TurnStartedNotification.startedAtMs: property added (REQUIRED)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := clone(t, base)
			tc.mutate(s)
			var got []string
			for _, v := range c.Check(s) {
				got = append(got, v.String())
			}
			if tc.want == "" && len(got) > 0 {
				t.Errorf("violations %q, want none", got)
			}
			if tc.want != "" && !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, tc.want) }) {
				t.Errorf("violations %q lack %q", got, tc.want)
			}
			diff := Diff(base, s)
			if tc.diff != "" && !slices.ContainsFunc(diff, func(l string) bool { return strings.Contains(l, tc.diff) }) {
				t.Errorf("diff %q lacks %q", diff, tc.diff)
			}
		})
	}
}

func TestDiffFeatures(t *testing.T) {
	t.Parallel()
	c := Contract{Features: []string{"kept", "dropped", "retired"}}
	a, err := ParseFeatures(`kept        stable             false
dropped     experimental       true
retired     stable             true
flipped     stable             false
staged      under development  false
gone        deprecated         false
`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseFeatures(`kept        stable             false
retired     removed            false
flipped     stable             true
staged      experimental       false
fresh       under development  false
`)
	if err != nil {
		t.Fatal(err)
	}
	failures, notes := c.DiffFeatures(a, b)
	if want := []string{"feature dropped: gone; the daemon sets it", "feature retired: removed; the daemon sets it"}; !slices.Equal(failures, want) {
		t.Errorf("failures %q, want %q", failures, want)
	}
	for _, want := range []string{"feature flipped: DEFAULT CHANGED false -> true", "feature staged: stage under development -> experimental",
		"feature fresh: added (under development, false)", "feature gone: gone (was deprecated, false)"} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	if f, n := c.DiffFeatures(a, a); len(f)+len(n) > 0 {
		t.Errorf("a list against itself: %q %q", f, n)
	}
	if _, err := ParseFeatures("name stable maybe\n"); err == nil {
		t.Error("ParseFeatures took a line without true or false")
	}
}
