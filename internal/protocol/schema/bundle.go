package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Node is one JSON schema object, as decoded by encoding/json.
type Node = map[string]any

// Snapshot is the part of codex's app-server schema the daemon relies on.
type Snapshot struct {
	// CodexVersion is the codex that generated it ("0.169.0").
	CodexVersion string `json:"codexVersion"`
	// Methods maps each method the contract names to the definition of its params ("" for a
	// method without params), as the schema's request and notification unions declare it.
	Methods map[string]string `json:"methods"`
	// Definitions are the schema's definitions, flattened into one namespace with every $ref
	// written "#/definitions/NAME"; in a trimmed snapshot, the closure of the contract's.
	Definitions map[string]Node `json:"definitions"`
}

// bundleFile is the file of `codex app-server generate-json-schema` holding every definition:
// v1 definitions at the top, v2 ones nested under "v2".
const bundleFile = "codex_app_server_protocol.schemas.json"

// unions are the definitions that list the methods, each variant {method: {enum: [m]}, params:
// {$ref}}.
var unions = []string{"ClientRequest", "ClientNotification", "ServerRequest", "ServerNotification"}

// Generate runs `bin app-server generate-json-schema --experimental` in a scratch directory (with a CODEX_HOME
// of its own, so the operator's config plays no part) and returns the whole schema, flattened.
func Generate(ctx context.Context, bin string) (*Snapshot, error) {
	dir, err := os.MkdirTemp("", "codex-schema-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out")
	// --experimental: the daemon opts in to the experimental API (initialize's
	// capabilities.experimentalApi), whose fields (availableDecisions) it reads.
	if _, err := runCodex(ctx, bin, dir, "app-server", "generate-json-schema", "--experimental", "--out", out); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(out, bundleFile))
	if err != nil {
		return nil, fmt.Errorf("codex %s wrote no %s: %w", bin, bundleFile, err)
	}
	s, err := parseBundle(raw)
	if err != nil {
		return nil, fmt.Errorf("%s of %s: %w", bundleFile, bin, err)
	}
	if s.CodexVersion, err = codexVersion(ctx, bin, dir); err != nil {
		return nil, err
	}
	return s, nil
}

// runCodex runs bin with args and a fresh CODEX_HOME and HOME under dir, and returns its stdout.
func runCodex(ctx context.Context, bin, dir string, args ...string) ([]byte, error) {
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "CODEX_HOME="+filepath.Join(home, ".codex"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func codexVersion(ctx context.Context, bin, dir string) (string, error) {
	out, err := runCodex(ctx, bin, dir, "--version")
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != "codex-cli" {
		return "", fmt.Errorf("%s --version printed %q, want \"codex-cli <version>\"", bin, out)
	}
	return f[1], nil
}

// parseBundle flattens the bundle's definitions (a v2 one wins over a v1 one of the same name)
// and reads the method unions.
func parseBundle(raw []byte) (*Snapshot, error) {
	var b struct {
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	defs := make(map[string]Node)
	for name, r := range b.Definitions {
		if name == "v2" {
			continue
		}
		var n Node
		if err := json.Unmarshal(r, &n); err != nil {
			return nil, fmt.Errorf("definition %s: %w", name, err)
		}
		defs[name] = n
	}
	if r, ok := b.Definitions["v2"]; ok {
		var v2 map[string]Node
		if err := json.Unmarshal(r, &v2); err != nil {
			return nil, fmt.Errorf("v2 definitions: %w", err)
		}
		for name, n := range v2 {
			defs[name] = n
		}
	}
	for _, n := range defs {
		rewriteRefs(n)
	}
	s := &Snapshot{Methods: make(map[string]string), Definitions: defs}
	for _, u := range unions {
		def, ok := defs[u]
		if !ok {
			return nil, fmt.Errorf("no definition %s", u)
		}
		for _, v := range nodes(def["oneOf"]) {
			props, _ := v["properties"].(Node)
			method, _ := props["method"].(Node)
			enum, _ := method["enum"].([]any)
			if len(enum) != 1 {
				continue
			}
			m, _ := enum[0].(string)
			params, _ := props["params"].(Node)
			s.Methods[m] = refName(params)
		}
	}
	if len(s.Methods) == 0 {
		return nil, errors.New("no methods in the request and notification unions")
	}
	return s, nil
}

// rewriteRefs writes every $ref under n as "#/definitions/NAME".
func rewriteRefs(n any) {
	switch v := n.(type) {
	case Node:
		if r, ok := v["$ref"].(string); ok {
			v["$ref"] = "#/definitions/" + r[strings.LastIndex(r, "/")+1:]
		}
		for _, c := range v {
			rewriteRefs(c)
		}
	case []any:
		for _, c := range v {
			rewriteRefs(c)
		}
	}
}

// refName is the definition a {"$ref": ...} node names, or "".
func refName(n Node) string {
	r, _ := n["$ref"].(string)
	return strings.TrimPrefix(r, "#/definitions/")
}

// nodes returns the objects of a JSON array (oneOf, anyOf, allOf).
func nodes(v any) []Node {
	arr, _ := v.([]any)
	out := make([]Node, 0, len(arr))
	for _, e := range arr {
		if n, ok := e.(Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// Trim keeps of s what c uses: its methods, and the closure of the definitions they and c's
// types and enums name. A definition c names that s lacks is left out (Check reports it).
func (s *Snapshot) Trim(c Contract) *Snapshot {
	out := &Snapshot{CodexVersion: s.CodexVersion, Methods: make(map[string]string), Definitions: make(map[string]Node)}
	var roots []string
	for _, u := range c.Uses {
		if p, ok := s.Methods[u.Method]; ok {
			out.Methods[u.Method] = p
			roots = append(roots, p)
		}
		roots = append(roots, u.Params, u.Result)
	}
	for _, e := range c.Enums {
		roots = append(roots, e.Def)
	}
	for _, d := range c.Decoded {
		roots = append(roots, d.Def)
	}
	for len(roots) > 0 {
		name := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		if _, seen := out.Definitions[name]; seen || name == "" {
			continue
		}
		def, ok := s.Definitions[name]
		if !ok {
			continue
		}
		out.Definitions[name] = withoutDescriptions(def).(Node)
		roots = append(roots, refsIn(def)...)
	}
	return out
}

// withoutDescriptions copies n without its "description" annotations: prose that changes with
// every release, means nothing on the wire, and would double the snapshot. A property named
// description (its schema an object, as in DynamicToolSpec) is kept.
func withoutDescriptions(n any) any {
	switch v := n.(type) {
	case Node:
		out := make(Node, len(v))
		for k, c := range v {
			if _, prose := c.(string); k != "description" || !prose {
				out[k] = withoutDescriptions(c)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, c := range v {
			out[i] = withoutDescriptions(c)
		}
		return out
	}
	return n
}

// refsIn lists the definitions n refers to, sorted.
func refsIn(n any) []string {
	var out []string
	var walk func(any)
	walk = func(n any) {
		switch v := n.(type) {
		case Node:
			if r := refName(v); r != "" {
				out = append(out, r)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(n)
	slices.Sort(out)
	return slices.Compact(out)
}

// Marshal is the snapshot as committed: indented, keys sorted, ending in a newline.
func (s *Snapshot) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Load reads a snapshot written by Marshal.
func Load(path string) (*Snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}
