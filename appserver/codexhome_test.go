package appserver

import "testing"

// codex uses CODEX_HOME when it is set and not empty, else $HOME/.codex.
func TestEffectiveCodexHome(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"HOME=/home/u", "CODEX_HOME=/c"}, "/c"},
		{[]string{"HOME=/home/u"}, "/home/u/.codex"},
		{[]string{"HOME=/home/u", "CODEX_HOME="}, "/home/u/.codex"},
		{[]string{"CODEX_HOME=/a", "HOME=/h", "CODEX_HOME=/b"}, "/b"},
	} {
		if got := EffectiveCodexHome(tc.env); got != tc.want {
			t.Errorf("EffectiveCodexHome(%q) = %q, want %q", tc.env, got, tc.want)
		}
	}
}
