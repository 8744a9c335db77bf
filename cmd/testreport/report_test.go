package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

const sample = `{"Time":"2026-01-01T00:00:00Z","Action":"start","Package":"m/a"}
{"Time":"2026-01-01T00:00:01Z","Action":"run","Package":"m/a","Test":"TestX"}
{"Time":"2026-01-01T00:00:03Z","Action":"pass","Package":"m/a","Test":"TestX/sub","Elapsed":1.5}
{"Time":"2026-01-01T00:00:03Z","Action":"pass","Package":"m/a","Test":"TestX","Elapsed":2}
{"Time":"2026-01-01T00:00:04Z","Action":"fail","Package":"m/a","Test":"TestY","Elapsed":0.5}
go: downloading something
{"Time":"2026-01-01T00:00:05Z","Action":"fail","Package":"m/a","Elapsed":4.2}
{"Time":"2026-01-01T00:00:02Z","Action":"pass","Package":"m/b","Test":"TestZ","Elapsed":3}
{"Time":"2026-01-01T00:00:06Z","Action":"pass","Package":"m/b","Elapsed":3.1}
{"Time":"2026-01-01T00:00:06Z","Action":"skip","Package":"m/c","Elapsed":0}
`

func TestParse(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if r.Wall != 6*time.Second {
		t.Errorf("wall = %s, want 6s", r.Wall)
	}
	if len(r.Packages) != 3 || r.Packages[0].Path != "m/a" || r.Packages[0].Tests != 2 || r.Packages[0].Result != "fail" ||
		r.Packages[1].Path != "m/b" || r.Packages[1].Elapsed != 3100*time.Millisecond {
		t.Errorf("packages = %+v", r.Packages)
	}
	// Subtests belong to their parent; the slowest comes first.
	if len(r.Tests) != 3 || r.Tests[0].Name != "TestZ" || r.Tests[1].Name != "TestX" || r.Tests[2].Result != "fail" {
		t.Errorf("tests = %+v", r.Tests)
	}
	if got := r.sum(); got != 7300*time.Millisecond {
		t.Errorf("sum = %s", got)
	}
}

func TestReportAndCompare(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	r.Name = "after"
	var b bytes.Buffer
	if err := Report(&b, r, 2); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Wall time of the run (first to last event): 6.0 s", "| m/a | 4.2 s | 2 | fail |", "The 2 slowest tests", "| TestZ | m/b | 3.0 s |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "m/c") || strings.Contains(out, "TestY") {
		t.Errorf("report lists a package without tests or more than the top 2:\n%s", out)
	}
	before := *r
	before.Name, before.Wall = "before", 10*time.Second
	before.Packages = append([]Package{{Path: "m/gone", Elapsed: time.Second, Tests: 1, Result: "pass"}}, before.Packages...)
	b.Reset()
	if err := Compare(&b, &before, r, 1); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "| wall time | 10.0 s | 6.0 s |") || !strings.Contains(out, "| m/b | 3.1 s | 3.1 s |") ||
		!strings.Contains(out, "| m/gone | 1.0 s | — |") {
		t.Errorf("comparison:\n%s", out)
	}
}
