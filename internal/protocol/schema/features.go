package schema

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Files of the snapshot, in this package's directory.
const (
	SnapshotFile = "app-server.schema.json"
	FeaturesFile = "features.txt"
)

// Feature is one line of `codex features list`: a feature flag, its stage ("stable",
// "experimental", "under development", "deprecated", "removed") and whether it is on by default
// (with an empty CODEX_HOME).
type Feature struct {
	Name, Stage string
	On          bool
}

// Features is `codex features list`, in its order.
type Features []Feature

// ListFeatures runs `bin features list` with a fresh CODEX_HOME, so the defaults show.
func ListFeatures(ctx context.Context, bin string) (Features, error) {
	dir, err := os.MkdirTemp("", "codex-features-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out, err := runCodex(ctx, bin, dir, "features", "list")
	if err != nil {
		return nil, err
	}
	return ParseFeatures(string(out))
}

// loadFeatures reads the snapshot's FeaturesFile.
func loadFeatures() (Features, error) {
	b, err := os.ReadFile(FeaturesFile)
	if err != nil {
		return nil, err
	}
	return ParseFeatures(string(b))
}

// ParseFeatures reads `codex features list` output: "name  stage words  true|false" per line.
func ParseFeatures(s string) (Features, error) {
	var out Features
	for i, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || (f[len(f)-1] != "true" && f[len(f)-1] != "false") {
			return nil, fmt.Errorf("features list line %d: %q: want NAME STAGE true|false", i+1, line)
		}
		out = append(out, Feature{Name: f[0], Stage: strings.Join(f[1:len(f)-1], " "), On: f[len(f)-1] == "true"})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("features list is empty")
	}
	return out, nil
}

// String is the list as codex prints it (columns padded), one feature a line.
func (fs Features) String() string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%-40s %-18s %t\n", f.Name, f.Stage, f.On)
	}
	return b.String()
}

// DiffFeatures compares the features of two codex releases against the contract. Failures are
// the features the daemon or its tests set (Contract.Features) that b no longer has, or has as
// "removed": their setting would do nothing, silently (the children would stop being lean, the
// tests would reach for the network). Everything else (a feature added or gone, a stage or a
// default changed) is a note: the daemon does not depend on it, but a changed default changes
// what codex does for the daemon's users, so a person reads it before the bump.
func (c Contract) DiffFeatures(a, b Features) (failures, notes []string) {
	index := func(fs Features) map[string]Feature {
		m := make(map[string]Feature, len(fs))
		for _, f := range fs {
			m[f.Name] = f
		}
		return m
	}
	am, bm := index(a), index(b)
	for _, name := range c.Features {
		switch f, ok := bm[name]; {
		case !ok:
			failures = append(failures, fmt.Sprintf("feature %s: gone; the daemon sets it", name))
		case f.Stage == "removed":
			failures = append(failures, fmt.Sprintf("feature %s: removed; the daemon sets it", name))
		}
	}
	for _, f := range a {
		g, ok := bm[f.Name]
		switch {
		case !ok:
			notes = append(notes, fmt.Sprintf("feature %s: gone (was %s, %t)", f.Name, f.Stage, f.On))
		case g.On != f.On:
			notes = append(notes, fmt.Sprintf("feature %s: DEFAULT CHANGED %t -> %t (%s -> %s)", f.Name, f.On, g.On, f.Stage, g.Stage))
		case g.Stage != f.Stage:
			notes = append(notes, fmt.Sprintf("feature %s: stage %s -> %s (default %t)", f.Name, f.Stage, g.Stage, g.On))
		}
	}
	for _, g := range b {
		if _, ok := am[g.Name]; !ok {
			notes = append(notes, fmt.Sprintf("feature %s: added (%s, %t)", g.Name, g.Stage, g.On))
		}
	}
	slices.Sort(failures)
	slices.Sort(notes)
	return failures, notes
}
