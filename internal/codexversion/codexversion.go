// Package codexversion knows which codex releases this version of the daemon is tested with, and
// compares codex versions.
//
// The range is the one place that says it: doctor and run's log warn outside it, the Makefile's
// pin (CODEX_VERSION) must lie within it (a test checks it), and a release joins it after `make
// compat CODEX_VERSION=X` passed (docs/development.md).
package codexversion

import (
	"fmt"
	"strconv"
	"strings"
)

// The oldest and newest codex releases this version of the daemon is tested with: each ran the
// end-to-end suite, the wire contract and the features check.
const (
	Oldest = "0.169.0"
	Newest = "0.171.0"
)

// Range says how version v stands against the tested range: 0 within it, -1 older than Oldest,
// +1 newer than Newest. A version it cannot parse is an error (and -1).
func Range(v string) (int, error) {
	if c, err := Compare(v, Oldest); err != nil || c < 0 {
		return -1, err
	}
	if c, err := Compare(v, Newest); err != nil || c > 0 {
		return 1, err
	}
	return 0, nil
}

// Compare compares two codex versions "MAJOR.MINOR.PATCH[-PRE]" (what `codex --version` prints
// after "codex-cli "): -1, 0 or +1. A pre-release (0.172.0-alpha.1) stands below its release, as
// in semantic versioning; two pre-releases compare as strings.
func Compare(a, b string) (int, error) {
	na, prea, err := parse(a)
	if err != nil {
		return 0, err
	}
	nb, preb, err := parse(b)
	if err != nil {
		return 0, err
	}
	for i := range na {
		if na[i] != nb[i] {
			return sign(na[i] - nb[i]), nil
		}
	}
	switch {
	case prea == preb:
		return 0, nil
	case prea == "":
		return 1, nil
	case preb == "":
		return -1, nil
	}
	return strings.Compare(prea, preb), nil
}

func sign(n int) int {
	if n < 0 {
		return -1
	}
	return 1
}

func parse(v string) (nums [3]int, pre string, err error) {
	core, pre, _ := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return nums, "", fmt.Errorf("codex version %q: want MAJOR.MINOR.PATCH", v)
	}
	for i, p := range parts {
		if nums[i], err = strconv.Atoi(p); err != nil || nums[i] < 0 || strings.HasPrefix(p, "+") {
			return nums, "", fmt.Errorf("codex version %q: want MAJOR.MINOR.PATCH", v)
		}
	}
	return nums, pre, nil
}
