package molecule

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/molecule-ai/codex-warm/internal/secretset"
	"github.com/molecule-ai/codex-warm/supervisor"
)

// A chip's summary is "🛠 name(argument)", redacted with the whole secret set before it is cut
// (a token cut in two would pass), at most maxChipSummary characters, with the calls it stands
// for after it.
func TestChipSummary(t *testing.T) {
	set := secretset.New()
	secret := "sk-platform-login-" + strings.Repeat("z", 150)
	set.Add(secretset.PlatformLogin, secret)
	red := redactor{set: set}
	if got := chipSummary(red, supervisor.TurnProgress{Tool: "shell", ToolArg: "npm test"}, 0); got != "🛠 shell(npm test)" {
		t.Errorf("got %q", got)
	}
	got := chipSummary(red, supervisor.TurnProgress{Tool: "shell", ToolArg: "curl -H 'Authorization: Bearer " + secret + "' x"}, 0)
	if strings.Contains(got, "sk-platform") || !strings.Contains(got, secretset.Redacted) {
		t.Errorf("not redacted before the cut: %q", got)
	}
	long := chipSummary(red, supervisor.TurnProgress{Tool: "shell", ToolArg: strings.Repeat("é", 300)}, 4)
	if n := utf8.RuneCountInString(long); n != maxChipSummary || !strings.HasSuffix(long, "… +4") || !utf8.ValidString(long) {
		t.Errorf("%d characters: %q", n, long)
	}
}
