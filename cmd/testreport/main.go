// Command testreport reads the output of `go test -json` and prints where the run spent its
// time, as Markdown: the run's wall time, each package's time and test count, and the slowest
// tests. Given two files (before and after a change) it prints the packages side by side.
//
//	go test -json ./... > test.json; go run ./cmd/testreport test.json
//	go run ./cmd/testreport -top 25 before.json after.json
//
// `make test-report` runs the suite and this report in one step.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("testreport", flag.ContinueOnError)
	top := fs.Int("top", 25, "how many of the slowest tests to list")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return fmt.Errorf("usage: testreport [-top N] test.json [after.json]")
	}
	var runs []*Run
	for _, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		r, err := Parse(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		r.Name = path
		runs = append(runs, r)
	}
	if len(runs) == 2 {
		return Compare(w, runs[0], runs[1], *top)
	}
	return Report(w, runs[0], *top)
}
