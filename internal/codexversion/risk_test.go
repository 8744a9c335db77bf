package codexversion

import (
	"strings"
	"testing"
)

// Outside the tested range doctor and run's log say which way, what the operator risks, and
// what to do: for a newer codex, how to try it first.
func TestCodexRangeRisk(t *testing.T) {
	t.Parallel()
	const newer, older = "999.0.0", "0.0.1"
	tested := Oldest + " to " + Newest
	for _, tc := range []struct {
		v         string
		where     int
		want, fix []string
	}{
		{newer, 1, []string{"codex-cli " + newer + " is newer", tested, "lose replies"},
			[]string{"@openai/codex@" + Newest, "make compat CODEX_VERSION=" + newer}},
		{older, -1, []string{"codex-cli " + older + " is older", tested, "may lack requests the daemon sends"},
			[]string{"@openai/codex@" + Newest}},
	} {
		detail, fix := Risk(tc.v, tc.where)
		for _, w := range tc.want {
			if !strings.Contains(detail, w) {
				t.Errorf("risk %q lacks %q", detail, w)
			}
		}
		for _, w := range tc.fix {
			if !strings.Contains(fix, w) {
				t.Errorf("fix %q lacks %q", fix, w)
			}
		}
	}
}
