package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Diff lists how schema b differs from schema a, one readable line each, sorted: methods whose
// params changed, definitions added or gone, and within a definition every property, enum
// value, required entry or type added, gone or changed; and definitions b's closure added. Descriptions are left out: they change
// with every release and mean nothing on the wire. Union variants are matched by title, not by
// position, so a variant added in the middle reads as one line.
func Diff(a, b *Snapshot) []string {
	var out []string
	for m, p := range a.Methods {
		if q, ok := b.Methods[m]; !ok {
			out = append(out, fmt.Sprintf("method %s: gone", m))
		} else if p != q {
			out = append(out, fmt.Sprintf("method %s: params %s -> %s", m, p, q))
		}
	}
	for name, def := range a.Definitions {
		other, ok := b.Definitions[name]
		if !ok {
			out = append(out, name+": definition gone")
			continue
		}
		diffNode(name, def, other, &out)
	}
	for name := range b.Definitions {
		if _, ok := a.Definitions[name]; !ok {
			out = append(out, name+": definition added")
		}
	}
	slices.Sort(out)
	return out
}

func diffNode(path string, a, b any, out *[]string) {
	an, aok := a.(Node)
	bn, bok := b.(Node)
	if !aok || !bok {
		if !equalJSON(a, b) {
			*out = append(*out, fmt.Sprintf("%s: %s -> %s", path, compact(a), compact(b)))
		}
		return
	}
	keys := make([]string, 0, len(an)+len(bn))
	for k := range an {
		keys = append(keys, k)
	}
	for k := range bn {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		if k == "description" || k == "title" {
			continue
		}
		av, inA := an[k]
		bv, inB := bn[k]
		p := path + "." + k
		switch {
		case k == "properties":
			diffProps(path, av, bv, bn, out)
		case k == "required" || k == "enum":
			diffSet(p, av, bv, out)
		case k == "oneOf" || k == "anyOf" || k == "allOf":
			diffVariants(p, av, bv, out)
		case !inA:
			*out = append(*out, fmt.Sprintf("%s: added %s", p, compact(bv)))
		case !inB:
			*out = append(*out, fmt.Sprintf("%s: gone (was %s)", p, compact(av)))
		default:
			diffNode(p, av, bv, out)
		}
	}
}

// diffProps reports properties added (saying whether b requires them), gone, or changed.
func diffProps(path string, a, b any, bParent Node, out *[]string) {
	ap, _ := a.(Node)
	bp, _ := b.(Node)
	required := nodesOrStrings(bParent["required"])
	for k, av := range ap {
		if bv, ok := bp[k]; ok {
			diffNode(path+"."+k, av, bv, out)
		} else {
			*out = append(*out, fmt.Sprintf("%s.%s: property gone", path, k))
		}
	}
	for k, bv := range bp {
		if _, ok := ap[k]; !ok {
			kind := "optional"
			if slices.Contains(required, k) {
				kind = "REQUIRED"
			}
			*out = append(*out, fmt.Sprintf("%s.%s: property added (%s) %s", path, k, kind, compact(bv)))
		}
	}
}

func diffSet(path string, a, b any, out *[]string) {
	as, bs := nodesOrStrings(a), nodesOrStrings(b)
	for _, v := range as {
		if !slices.Contains(bs, v) {
			*out = append(*out, fmt.Sprintf("%s: %q gone", path, v))
		}
	}
	for _, v := range bs {
		if !slices.Contains(as, v) {
			*out = append(*out, fmt.Sprintf("%s: %q added", path, v))
		}
	}
}

// diffVariants matches union variants by their key (title, else the tag value, else the $ref,
// else an enum's first value, else position).
func diffVariants(path string, a, b any, out *[]string) {
	key := func(i int, n Node) string {
		if t, ok := n["title"].(string); ok {
			return t
		}
		if props, ok := n["properties"].(Node); ok {
			if tp, ok := props["type"].(Node); ok {
				if e := nodesOrStrings(tp["enum"]); len(e) == 1 {
					return e[0]
				}
			}
		}
		if r := refName(n); r != "" {
			return r
		}
		if e := nodesOrStrings(n["enum"]); len(e) > 0 {
			return "enum " + e[0]
		}
		return fmt.Sprint(i)
	}
	index := func(v any) (map[string]Node, []string) {
		m := map[string]Node{}
		var order []string
		for i, n := range nodes(v) {
			k := key(i, n)
			m[k] = n
			order = append(order, k)
		}
		return m, order
	}
	am, ao := index(a)
	bm, bo := index(b)
	for _, k := range ao {
		if bn, ok := bm[k]; ok {
			diffNode(path+"["+k+"]", am[k], bn, out)
		} else {
			*out = append(*out, fmt.Sprintf("%s[%s]: variant gone", path, k))
		}
	}
	for _, k := range bo {
		if _, ok := am[k]; !ok {
			*out = append(*out, fmt.Sprintf("%s[%s]: variant added %s", path, k, compact(bm[k])))
		}
	}
}

func equalJSON(a, b any) bool { return compact(a) == compact(b) }

// compact is v as one line of JSON, cut at 200 bytes.
func compact(v any) string {
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ReplaceAll(s, "\n", " ")
}
