package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one line of the human report: a metric measured on two sides and their ratio, or a
// note (a one-sided finding such as a verdict or a memory figure) when Note is set.
type row struct {
	Path       string // the network path it was measured on (netPath.Name)
	Comparison string
	Metric     string
	A, B       string // "exec 412.3" style cells, side name first
	Ratio      string
	Note       string
}

// sideCell formats one side's measurement for the table.
func sideCell(name string, v float64) string {
	return name + " " + fmtFloat(v)
}

// ratioCell formats a ratio for the table ("8.52x", or "-" when there is none).
func ratioCell(r float64) string {
	if math.IsNaN(r) {
		return "-"
	}
	return fmtFloat(r) + "x"
}

// writeTable prints the two-sided rows as an aligned table ordered by comparison, then the notes
// under it, so that long notes do not stretch the table's columns. With more than one network
// path, a row of the first path carries the same row of each later path in further columns, and
// a later path's notes are marked with its name.
func writeTable(w io.Writer, paths []string, rows []row) error {
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.Comparison, b.Comparison) })
	primary := ""
	if len(paths) > 0 {
		primary = paths[0]
	}
	later := func(r row) bool { return primary != "" && r.Path != "" && r.Path != primary }
	type key struct{ path, comparison, metric, a, b string }
	// A comparison may have several rows of one metric (first message: three pairs): the side
	// names tell them apart.
	sideName := func(cell string) string { name, _, _ := strings.Cut(cell, " "); return name }
	byKey := make(map[key]row)
	for _, r := range rows {
		if r.Note == "" && later(r) {
			byKey[key{r.Path, r.Comparison, r.Metric, sideName(r.A), sideName(r.B)}] = r
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "COMPARISON\tMETRIC\tSIDE A\tSIDE B\tRATIO"
	for _, p := range paths[min(1, len(paths)):] {
		header += "\t" + strings.ToUpper(p) + ": SIDE A\tSIDE B\tRATIO"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		if r.Note != "" || later(r) {
			continue
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.Comparison, r.Metric, r.A, r.B, r.Ratio)
		for _, p := range paths[min(1, len(paths)):] {
			o, ok := byKey[key{p, r.Comparison, r.Metric, sideName(r.A), sideName(r.B)}]
			if !ok {
				o = row{A: "-", B: "-", Ratio: "-"}
			}
			line += fmt.Sprintf("\t%s\t%s\t%s", o.A, o.B, o.Ratio)
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	first := true
	for _, r := range rows {
		if r.Note == "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nnotes:")
			first = false
		}
		comparison := r.Comparison
		if later(r) && !strings.HasPrefix(comparison, "0 ") {
			comparison += " [" + r.Path + "]"
		}
		fmt.Fprintf(w, "  %s, %s: %s\n", comparison, r.Metric, r.Note)
	}
	return nil
}

// summary is the machine-readable result: name=value pairs in a fixed order. Keys are declared
// up front (with NaN) so a comparison that failed still shows its keys, as NaN, instead of making
// the output's shape depend on what went wrong.
type summary struct {
	keys []string
	vals map[string]any
}

func newSummary(keys ...string) *summary {
	s := &summary{vals: make(map[string]any)}
	for _, k := range keys {
		s.set(k, math.NaN())
	}
	return s
}

// set records a value: float64, int, int64, bool or string. A new key goes to the end.
func (s *summary) set(key string, v any) {
	if _, ok := s.vals[key]; !ok {
		s.keys = append(s.keys, key)
	}
	s.vals[key] = v
}

func (s *summary) get(key string) any { return s.vals[key] }

// merge sets every value of o under prefix+key, in o's order.
func (s *summary) merge(prefix string, o *summary) {
	for _, k := range o.keys {
		s.set(prefix+k, o.vals[k])
	}
}

// writeKV prints one name=value line per key.
func (s *summary) writeKV(w io.Writer) error {
	var b strings.Builder
	for _, k := range s.keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(fmtValue(s.vals[k]))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// marshalJSON encodes the summary as one JSON object in key order. NaN, which JSON cannot
// represent, becomes null.
func (s *summary) marshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, k := range s.keys {
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		v := s.vals[k]
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			v = nil
		}
		vb, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("summary %s: %w", k, err)
		}
		fmt.Fprintf(&b, "  %s: %s", kb, vb)
		if i < len(s.keys)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// fmtValue formats a summary value for a name=value line.
func fmtValue(v any) string {
	switch x := v.(type) {
	case float64:
		return fmtFloat(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return strconv.FormatBool(x)
	case string:
		// Values stay on one line and free of spaces so `name=value` parses with a plain split.
		return strings.Join(strings.Fields(x), "_")
	default:
		return fmt.Sprint(x)
	}
}

// fmtFloat prints a number with about four significant digits and never in exponent form, so
// shell scripts can compare it: 412.3, 8.517, 0.04821, NaN.
func fmtFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 0):
		return "NaN"
	}
	a := math.Abs(f)
	dec := 0
	switch {
	case a == 0:
		dec = 0
	case a >= 1000:
		dec = 0
	case a >= 100:
		dec = 1
	case a >= 10:
		dec = 2
	case a >= 1:
		dec = 3
	default:
		// Four significant digits below 1: 0.04821 → 5 decimals.
		dec = min(12, 3-int(math.Floor(math.Log10(a))))
	}
	return strconv.FormatFloat(f, 'f', dec, 64)
}
