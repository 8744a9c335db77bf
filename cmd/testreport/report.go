package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (test2json's TestEvent).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
}

// Run is what one `go test -json` run spent.
type Run struct {
	// Name is where the run was read from.
	Name string
	// Wall is the time from the first event to the last.
	Wall time.Duration
	// Packages are the packages that ran tests, slowest first.
	Packages []Package
	// Tests are the top-level tests (subtests are part of their parent), slowest first.
	Tests []Test
}

// Package is one package's result.
type Package struct {
	Path    string
	Elapsed time.Duration
	Tests   int
	Result  string // pass, fail or skip
}

// Test is one top-level test's result. A parallel test's time counts from when it resumed.
type Test struct {
	Package string
	Name    string
	Elapsed time.Duration
	Result  string
}

// Parse reads `go test -json` output. Lines that are not JSON (build output mixed in) are
// skipped: the report is about time, and a failed build shows up as a failed package.
func Parse(r io.Reader) (*Run, error) {
	run := &Run{}
	var first, last time.Time
	pkgs := map[string]*Package{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			continue
		}
		if !e.Time.IsZero() {
			if first.IsZero() || e.Time.Before(first) {
				first = e.Time
			}
			if e.Time.After(last) {
				last = e.Time
			}
		}
		if e.Action != "pass" && e.Action != "fail" && e.Action != "skip" {
			continue
		}
		d := time.Duration(e.Elapsed * float64(time.Second))
		p := pkgs[e.Package]
		if p == nil {
			p = &Package{Path: e.Package}
			pkgs[e.Package] = p
		}
		switch {
		case e.Test == "":
			p.Elapsed, p.Result = d, e.Action
		case !strings.Contains(e.Test, "/"):
			p.Tests++
			run.Tests = append(run.Tests, Test{Package: e.Package, Name: e.Test, Elapsed: d, Result: e.Action})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	run.Wall = last.Sub(first)
	for _, p := range pkgs {
		run.Packages = append(run.Packages, *p)
	}
	slices.SortFunc(run.Packages, func(a, b Package) int {
		return cmp.Or(cmp.Compare(b.Elapsed, a.Elapsed), cmp.Compare(a.Path, b.Path))
	})
	slices.SortFunc(run.Tests, func(a, b Test) int {
		return cmp.Or(cmp.Compare(b.Elapsed, a.Elapsed), cmp.Compare(a.Package, b.Package), cmp.Compare(a.Name, b.Name))
	})
	return run, nil
}

// sum is the packages' time added up: what the run would take one package at a time.
func (r *Run) sum() time.Duration {
	var d time.Duration
	for _, p := range r.Packages {
		d += p.Elapsed
	}
	return d
}

// Report writes r as Markdown: totals, every package that ran tests, the top slowest tests.
func Report(w io.Writer, r *Run, top int) error {
	fmt.Fprintf(w, "Wall time of the run (first to last event): %s; packages' time added up: %s.\n\n", secs(r.Wall), secs(r.sum()))
	fmt.Fprintln(w, "| package | time | tests | result |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	for _, p := range r.Packages {
		if p.Tests == 0 && p.Result == "skip" {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s |\n", short(p.Path), secs(p.Elapsed), p.Tests, p.Result)
	}
	fmt.Fprintf(w, "\nThe %d slowest tests:\n\n", min(top, len(r.Tests)))
	fmt.Fprintln(w, "| test | package | time |")
	fmt.Fprintln(w, "|---|---|---:|")
	for _, t := range r.Tests[:min(top, len(r.Tests))] {
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.Name, short(t.Package), secs(t.Elapsed))
	}
	return nil
}

// Compare writes the packages of before and after side by side, then after's report.
func Compare(w io.Writer, before, after *Run, top int) error {
	fmt.Fprintf(w, "| | %s | %s |\n|---|---:|---:|\n", before.Name, after.Name)
	fmt.Fprintf(w, "| wall time | %s | %s |\n", secs(before.Wall), secs(after.Wall))
	fmt.Fprintf(w, "| packages' time added up | %s | %s |\n", secs(before.sum()), secs(after.sum()))
	// A package that ran in one of the runs only (renamed, added, removed) shows "—" in the other.
	cells := map[string]*[2]string{}
	var order []string
	for i, run := range []*Run{before, after} {
		for _, p := range run.Packages {
			if p.Tests == 0 && p.Result == "skip" {
				continue
			}
			c := cells[p.Path]
			if c == nil {
				c = &[2]string{"—", "—"}
				cells[p.Path] = c
				order = append(order, p.Path)
			}
			c[i] = secs(p.Elapsed)
		}
	}
	for _, path := range order {
		fmt.Fprintf(w, "| %s | %s | %s |\n", short(path), cells[path][0], cells[path][1])
	}
	fmt.Fprintf(w, "\n%s:\n\n", after.Name)
	return Report(w, after, top)
}

// short drops the module path every package shares.
func short(path string) string {
	if i := strings.Index(path, "codex-warm/"); i >= 0 {
		return path[i+len("codex-warm/"):]
	}
	return path
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
